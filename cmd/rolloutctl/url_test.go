package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every command refuses a workspace (-w) or a backup place written as a
// URL, with a usage error, and makes nothing: before, -w s3://bucket/x
// made a directory s3: in the working directory.
func TestURLWorkspacesAndBackupsAreRefused(t *testing.T) {
	ws := smallDemo(t)
	backup := filepath.Join(t.TempDir(), "backup")
	if _, errs, code := rolloutctl(t, "backup", "-w", ws, backup); code != 0 {
		t.Fatalf("backup: %s", errs)
	}
	cwd := t.TempDir()
	t.Chdir(cwd)
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"demo", "-w", "s3://bucket/x"}, `workspace "s3://bucket/x" is a URL of scheme s3`},
		{[]string{"import", "-w", "s3://bucket/x", "--from", "codex", ws}, `workspace "s3://bucket/x" is a URL of scheme s3`},
		{[]string{"show", "-w", "gs://b", smallRoot}, `workspace "gs://b" is a URL of scheme gs`},
		{[]string{"verify", "-w", "s3://bucket/x"}, `is a URL of scheme s3`},
		{[]string{"stats", "-w", "s3://bucket/x"}, `is a URL of scheme s3`},
		{[]string{"archive", "-w", "s3://bucket/x", smallRoot}, `is a URL of scheme s3`},
		{[]string{"backup", "-w", ws, "s3://bucket/prefix"}, `backup destination "s3://bucket/prefix" is a URL of scheme s3`},
		{[]string{"backup", "--verify", "s3://bucket/prefix"}, `backup "s3://bucket/prefix" is a URL of scheme s3`},
		{[]string{"backup", "restore", "s3://bucket/prefix", "w"}, `backup "s3://bucket/prefix" is a URL of scheme s3`},
		{[]string{"backup", "restore", backup, "postgres://h/db"}, `workspace "postgres://h/db" is a URL of scheme postgres`},
	} {
		_, errs, code := rolloutctl(t, tc.args...)
		if code != exitUsage || !strings.Contains(errs, tc.says) || !strings.Contains(errs, "which this build does not serve") {
			t.Errorf("%v: exit %d, %q; want exit %d saying %q", tc.args, code, errs, exitUsage, tc.says)
		}
		if !strings.Contains(errs, "hint: a directory whose name starts that way") {
			t.Errorf("%v: no hint: %q", tc.args, errs)
		}
	}
	ents, err := os.ReadDir(cwd)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		t.Errorf("a refused URL made %s in the working directory", e.Name())
	}
}

// A postgres:// workspace is a fleet's: unreachable, a command fails
// (exit 1, saying so) and makes nothing in the working directory.
func TestUnreachableFleetWorkspace(t *testing.T) {
	cwd := t.TempDir()
	t.Chdir(cwd)
	for _, args := range [][]string{{"list"}, {"verify"}, {"show", "t1"}} {
		args = append(args, "-w", "postgres://u@127.0.0.1:1/db?sslmode=disable&connect_timeout=1")
		_, errs, code := rolloutctl(t, args...)
		if code != exitFailed || !strings.Contains(errs, "PostgreSQL unavailable") {
			t.Errorf("%v: exit %d, %q; want exit %d saying PostgreSQL is unavailable", args, code, errs, exitFailed)
		}
	}
	if ents, _ := os.ReadDir(cwd); len(ents) != 0 {
		t.Errorf("a fleet DSN made %v in the working directory", ents)
	}
}
