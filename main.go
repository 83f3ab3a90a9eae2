// Atelier is a browser IDE backend. `go run .` serves it; the subcommands
// migrate the schema, add users and reset their passwords from a shell.
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"atelier/auth"
	"atelier/events"
	"atelier/migrations"
	"atelier/models"
	"atelier/server"
)

const usage = `usage:
  atelier                       serve (the default)
  atelier serve                 serve
  atelier migrate               apply pending schema migrations
  atelier migrate force N       record version N as applied after a by-hand repair
  atelier user add NAME [--admin]
                                add a user; the password is read from stdin
  atelier user reset-password NAME
                                set a user's password, read from stdin, and
                                end their sign-ins (also a lost admin's way back)`

func main() {
	// The sandbox's helpers (a jail's, a pod's) are this binary too: they
	// run from the init of their packages (sandbox/injail, inpod) and
	// never get here.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if err := run(ctx, os.Args[1:], log); err != nil {
		fmt.Fprintln(os.Stderr, "atelier:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, log *slog.Logger) error {
	cfg, err := server.LoadConfig(os.Getenv)
	if err != nil {
		return err
	}
	if len(args) == 0 || args[0] == "serve" {
		return server.Run(ctx, cfg, log, os.Stdout)
	}
	switch {
	case args[0] == "migrate":
		return migrate(ctx, cfg, log, args[1:])
	case len(args) >= 3 && args[0] == "user" && args[1] == "add":
		return addUser(ctx, cfg, log, args[2:], os.Stdin)
	case len(args) == 3 && args[0] == "user" && args[1] == "reset-password":
		return resetPassword(ctx, cfg, log, args[2], os.Stdin)
	case args[0] == "help" || args[0] == "-h" || args[0] == "--help":
		fmt.Println(usage)
		return nil
	}
	return errors.New("unknown command\n" + usage)
}

// withDatabase runs fn against the configured database, sharing the embedded
// cluster with a running server or starting it for the command's duration.
func withDatabase(ctx context.Context, cfg server.Config, log *slog.Logger, fn func(dsn string) error) (err error) {
	db, err := server.OpenDatabase(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err = errors.Join(err, db.Close(stopCtx))
	}()
	return fn(db.DSN)
}

func migrate(ctx context.Context, cfg server.Config, log *slog.Logger, args []string) error {
	return withDatabase(ctx, cfg, log, func(dsn string) error {
		var st migrations.Status
		var err error
		switch {
		case len(args) == 0:
			st, err = migrations.Up(dsn)
		case len(args) == 2 && args[0] == "force":
			v, perr := strconv.Atoi(args[1])
			if perr != nil {
				return fmt.Errorf("migrate force: %q is not a version number", args[1])
			}
			st, err = migrations.Force(dsn, v)
		default:
			return errors.New("migrate takes no arguments, or `force N`")
		}
		if err != nil {
			return err
		}
		fmt.Printf("schema at version %d of %d\n", st.Version, st.Latest)
		return nil
	})
}

func addUser(ctx context.Context, cfg server.Config, log *slog.Logger, args []string, stdin io.Reader) error {
	name, admin := args[0], false
	for _, a := range args[1:] {
		if a != "--admin" {
			return fmt.Errorf("user add: unknown flag %q", a)
		}
		admin = true
	}
	password, err := readPassword(stdin)
	if err != nil {
		return fmt.Errorf("user add: %w", err)
	}
	return withAuth(ctx, cfg, log, func(svc *auth.Service, _ *auth.People) error {
		u, err := svc.CreateUser(ctx, name, password, admin)
		if err != nil {
			return err
		}
		role := "user"
		if u.IsAdmin {
			role = "site admin"
		}
		fmt.Printf("added %s %s\n", role, u.Username)
		return nil
	})
}

// resetPassword sets a person's password from the shell: the way back for
// a site admin who lost theirs, with or without the server running.
func resetPassword(ctx context.Context, cfg server.Config, log *slog.Logger, name string, stdin io.Reader) error {
	password, err := readPassword(stdin)
	if err != nil {
		return fmt.Errorf("user reset-password: %w", err)
	}
	return withAuth(ctx, cfg, log, func(_ *auth.Service, people *auth.People) error {
		u, err := people.ResetPassword(ctx, name, password)
		if err != nil {
			return err
		}
		fmt.Printf("set the password of %s; their sign-ins have ended\n", u.Username)
		if u.Disabled() {
			fmt.Printf("%s is disabled: a site admin enables them on /admin/users\n", u.Username)
		}
		return nil
	})
}

// readPassword reads the first line of stdin.
func readPassword(stdin io.Reader) (string, error) {
	password, err := bufio.NewReader(stdin).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("reading the password: %w", err)
	}
	return strings.TrimRight(password, "\r\n"), nil
}

// withAuth runs fn with the accounts of the configured database, migrated
// first. What fn changes is recorded in the event log as the server
// records it.
func withAuth(ctx context.Context, cfg server.Config, log *slog.Logger, fn func(*auth.Service, *auth.People) error) error {
	return withDatabase(ctx, cfg, log, func(dsn string) error {
		if _, err := migrations.Up(dsn); err != nil {
			return err
		}
		store, err := models.Open(ctx, dsn, models.Pool{MaxOpen: 2, MaxIdle: 1})
		if err != nil {
			return err
		}
		defer store.Close()
		svc, err := auth.NewService(store, time.Now)
		if err != nil {
			return err
		}
		rec := events.New(store, log, events.Config{})
		defer rec.Close()
		return fn(svc, auth.NewPeople(svc, rec, nil, log))
	})
}
