package main

import (
	"context"
	"fmt"

	"github.com/cockroachdb/errors"
	"github.com/rolloutdb/rolloutdb"
	"github.com/spf13/cobra"
)

func newBackupCmd(g *globals) *cobra.Command {
	var verify, asJSON bool
	cmd := &cobra.Command{
		Use:   "backup DEST",
		Short: "Copy the workspace into DEST while hosts write (again into DEST: only what changed)",
		Long: `backup copies the workspace (-w) into DEST while hosts go on writing: each
rollout up to a durable frame boundary, state.db with its business state,
the artifacts, workspace.json, and a manifest (backup.json) of every file's
size and digest. DEST is a workspace: rolloutctl -w DEST works on it, and it
can be copied anywhere. A second backup into the same DEST copies only what
changed; an interrupted one is finished by running it again; a DEST holding
anything else is refused. --verify DEST re-checks a backup's digests.
A fleet workspace (-w postgres://…) is backed up as a local workspace,
whole every time, with no manifest: DEST must be new, empty or an earlier
backup of the same fleet workspace; rolloutctl -w DEST opens it.
backup restore DEST W makes a new workspace W from the backup in DEST.`,
		Args: cobra.ExactArgs(1),
	}
	cmd.AddCommand(newBackupRestoreCmd(g))
	cmd.Flags().BoolVar(&verify, "verify", false, "check the backup in DEST against its manifest instead")
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"dest", "threads", "incremental", "bytes_copied", "bytes_total", "elapsed"} (with --verify: {"bad": [...]})`)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if verify {
			bad, err := rolloutdb.VerifyBackup(args[0], "")
			if err != nil {
				return err
			}
			if asJSON {
				if err := printJSON(g, map[string]any{"bad": append([]string{}, bad...)}); err != nil {
					return err
				}
			} else {
				for _, b := range bad {
					fmt.Fprintln(g.stdout, b)
				}
			}
			if len(bad) > 0 {
				return &exitError{code: exitFailed, err: errors.Newf("backup %s: %d files differ from its manifest", args[0], len(bad))}
			}
			if !asJSON {
				fmt.Fprintf(g.stdout, "backup %s: every file matches its manifest\n", args[0])
			}
			return nil
		}
		return withDB(g, func(ctx context.Context, db *rolloutdb.DB, args []string) error {
			rep, err := db.Backup(ctx, args[0], rolloutdb.BackupOptions{})
			if errors.Is(err, rolloutdb.ErrNotABackup) {
				return &exitError{code: exitUsage, err: err}
			}
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(g, rep)
			}
			fmt.Fprintf(g.stdout, "backed up %d threads into %s: %d of %d bytes copied in %s\n", rep.Threads, rep.Dest, rep.BytesCopied, rep.BytesTotal, rep.Elapsed.Round(1e6))
			return nil
		})(cmd, args)
	}
	return cmd
}

func newBackupRestoreCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "restore DEST W",
		Short: "Make a new workspace W from the backup in DEST",
		Long: `restore checks every file of the backup in DEST against its manifest
(a backup with a file that differs is refused and nothing is written),
copies the backup to W, which must not exist or be empty, and opens it
once. W is whole or not there: the copy is made beside it and renamed.
(Opening DEST itself as a workspace works too; restore leaves the backup
as it is.)`,
		Args: cobra.ExactArgs(2),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"target", "files", "bytes", "threads"}`)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		rep, err := rolloutdb.RestoreBackup(cmd.Context(), args[0], args[1], "")
		if errors.Is(err, rolloutdb.ErrRestoreTarget) || errors.Is(err, rolloutdb.ErrNotABackup) {
			return &exitError{code: exitUsage, err: err}
		}
		if err != nil {
			return err
		}
		if asJSON {
			return printJSON(g, rep)
		}
		fmt.Fprintf(g.stdout, "restored %s into %s: %d files, %d bytes, %d active threads\n", args[0], rep.Target, rep.Files, rep.Bytes, rep.Threads)
		return nil
	}
	return cmd
}
