package fleet

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// connect makes a connection of its own (not the pool's) for role: the
// pool's settings, or dsn's when a test gives one, with params added.
func (l *Log) connect(ctx context.Context, role, dsn string, params map[string]string) (*pgx.Conn, error) {
	var cfg *pgx.ConnConfig
	if dsn != "" {
		var err error
		if cfg, err = pgx.ParseConfig(dsn); err != nil {
			return nil, err
		}
	} else {
		cfg = l.pool.Config().ConnConfig.Copy()
	}
	cfg.ConnectTimeout = l.opts.CommitTimeout
	cfg.RuntimeParams["application_name"] = "rolloutdb-" + role + " " + l.opts.Host
	for k, v := range params {
		cfg.RuntimeParams[k] = v
	}
	ctx, cancel := context.WithTimeout(ctx, l.opts.CommitTimeout)
	defer cancel()
	return pgx.ConnectConfig(ctx, cfg)
}
