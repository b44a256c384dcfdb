// Command prometheus serves a rolloutdb workspace's metrics to Prometheus
// through the OpenTelemetry Prometheus exporter, while a simulated host
// appends turns:
//
//	go run . -w /tmp/ws -listen :9464
//	curl -s localhost:9464/metrics | grep rolloutdb_
//
// It is its own module, so that the library does not depend on the SDK
// or the exporter: a host brings those, and passes its MeterProvider in
// rolloutdb.Options.MeterProvider.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rolloutdb/rolloutdb"
	"github.com/rolloutdb/rolloutdb/rollout"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

func main() {
	ws := flag.String("w", "", "workspace directory (default: a new temporary one)")
	listen := flag.String("listen", ":9464", "address to serve /metrics on")
	once := flag.Bool("once", false, "append one turn, print the metrics page, exit (a smoke test)")
	flag.Parse()
	if err := run(*ws, *listen, *once); err != nil {
		log.Fatal(err)
	}
}

func run(ws, listen string, once bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if ws == "" {
		dir, err := os.MkdirTemp("", "rolloutdb-prometheus-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		ws = dir
	}
	exporter, err := otelprom.New() // registers with prometheus.DefaultRegisterer
	if err != nil {
		return err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer mp.Shutdown(context.Background())

	db, err := rolloutdb.Open(ctx, ws, rolloutdb.Options{MeterProvider: mp})
	if err != nil {
		return err
	}
	defer db.Close()
	th, err := db.CreateThread(ctx, rolloutdb.ThreadOptions{})
	if err != nil {
		return err
	}
	defer th.Close()
	turn := func(i int) error {
		tu, err := th.StartTurn(ctx, rolloutdb.TurnOptions{Input: fmt.Sprintf("question %d", i)})
		if err != nil {
			return err
		}
		if _, err := tu.Add(ctx, rollout.Item{Type: rollout.ItemReasoning, Text: "thinking"}); err != nil {
			return err
		}
		_, err = tu.Commit(ctx, rolloutdb.Commit{Items: []rollout.Item{{Type: rollout.ItemAgentMessage, Text: "answer"}}})
		return err
	}
	if once {
		if err := turn(0); err != nil {
			return err
		}
		rec := &recorder{header: http.Header{}}
		promhttp.Handler().ServeHTTP(rec, &http.Request{Method: "GET", Header: http.Header{}})
		_, err := os.Stdout.Write(rec.body)
		return err
	}
	http.Handle("/metrics", promhttp.Handler())
	srv := &http.Server{Addr: listen}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	go func() {
		for i := 0; ctx.Err() == nil; i++ {
			if err := turn(i); err != nil {
				log.Print(err)
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	log.Printf("serving http://%s/metrics (workspace %s)", listen, ws)
	if err := srv.ListenAndServe(); err != http.ErrServerClosed {
		return err
	}
	return nil
}

// recorder is an http.ResponseWriter that keeps the body (-once).
type recorder struct {
	header http.Header
	body   []byte
}

func (r *recorder) Header() http.Header         { return r.header }
func (r *recorder) Write(b []byte) (int, error) { r.body = append(r.body, b...); return len(b), nil }
func (r *recorder) WriteHeader(int)             {}
