package rollout

import "github.com/cockroachdb/errors"

func errorsAs(err error, target any) bool { return errors.As(err, target) }
