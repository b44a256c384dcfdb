package location

import (
	"strings"
	"testing"

	"github.com/cockroachdb/errors"
)

func TestLocal(t *testing.T) {
	for _, tc := range []struct {
		path   string
		scheme string // "" for a local path
	}{
		{"s3://bucket/x", "s3"},
		{"postgres://u@127.0.0.1:5432/db?sslmode=disable", "postgres"},
		{"postgresql://h/db", "postgresql"},
		{"gs://b", "gs"},
		{"file:///tmp/w", "file"},
		{"git+ssh://h/r", "git+ssh"},
		{"S3://B", "S3"},
		{".", ""},
		{"/tmp/w", ""},
		{"w", ""},
		{"./s3://bucket/x", ""}, // the way to name such a directory
		{"s3:/bucket", ""},
		{"C://Users/w", ""}, // a Windows drive, not a scheme
		{"1s3://b", ""},
		{"", ""},
	} {
		err := Local("workspace", tc.path)
		if tc.scheme == "" {
			if err != nil {
				t.Errorf("%q: %v; want a local path", tc.path, err)
			}
			continue
		}
		if !errors.Is(err, ErrUnsupportedURL) {
			t.Errorf("%q: %v; want ErrUnsupportedURL", tc.path, err)
			continue
		}
		want := "workspace \"" + tc.path + "\" is a URL of scheme " + tc.scheme + ", which this build does not serve; a local workspace is a directory path"
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %q; want %q", tc.path, err, want)
		}
		if h := errors.GetAllHints(err); len(h) != 1 || !strings.Contains(h[0], "./"+tc.path) {
			t.Errorf("%q: hints %q", tc.path, h)
		}
	}
}
