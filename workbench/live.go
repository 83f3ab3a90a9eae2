package workbench

import (
	"errors"

	"atelier/fault"
	"atelier/terminal"
)

// A running command's output streams to the page as it is written: the
// sandbox hands every byte it reads to a terminal.Output, which its
// viewers follow as they follow a shell (byte offsets as event ids, a
// bounded ring and viewers, a write deadline each), and the command's end
// is its exit event. Nothing of it is stored: when the command ends, its
// output lives on only in the answer to the request that ran it.

// liveCommand is the output of a session's running command.
type liveCommand struct {
	out    *terminal.Output
	forget func()
}

// commandExit is the exit event of a command's stream: how it ended, as
// its answer says, and the notes of the capture.
type commandExit struct {
	Code       int      `json:"code"`
	Canceled   bool     `json:"canceled"`
	DurationMS int64    `json:"durationMs"`
	Notes      []string `json:"notes"`
	// Error is why there is no result (the command did not start, or what
	// it changed could not be captured), as a person reads it, and Reason
	// its machine-readable reason; Code is then -1.
	Error  string `json:"error,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// follow makes out the output CommandOutput finds for the session until
// end. A session runs one command at a time (its checkout's lock).
func (rc *runningCommands) follow(sessionID string, out *terminal.Output) *liveCommand {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.live == nil {
		rc.live = map[string]*terminal.Output{}
	}
	rc.live[sessionID] = out
	return &liveCommand{out: out, forget: func() {
		rc.mu.Lock()
		defer rc.mu.Unlock()
		if rc.live[sessionID] == out {
			delete(rc.live, sessionID)
		}
	}}
}

// end sends the exit event, made of the command's result or of why there
// is none, and forgets the output: viewers attached get what they have
// not seen and the exit; later ones find no command.
func (l *liveCommand) end(res *CommandResult, err error) {
	exit := commandExit{Code: -1, Notes: []string{}}
	switch {
	case err != nil:
		exit.Error = "The command did not run to its end; the server's log says why."
		if fe, ok := errors.AsType[fault.Error](err); ok {
			exit.Error, exit.Reason = fe.Fault().Message, fe.Fault().Reason
		}
	case res != nil:
		exit.Code, exit.Canceled, exit.DurationMS = res.ExitCode, res.Canceled, res.DurationMS
		if res.Notes != nil {
			exit.Notes = res.Notes
		}
	}
	l.out.End(exit)
	l.forget()
}

// CommandOutput is the output of the session's command running on this
// instance, for its stream, or ErrNoRunningCommand.
func (r *Runtime) CommandOutput(session Session) (*terminal.Output, error) {
	sess := session.Identity()
	r.commands.mu.Lock()
	defer r.commands.mu.Unlock()
	out, ok := r.commands.live[sess.ID]
	if !ok {
		return nil, ErrNoRunningCommand
	}
	return out, nil
}

// SessionCommand is the session's command running on this instance, for
// its page to follow; ok is false when none runs.
func (r *Runtime) SessionCommand(session Session) (c RunningCommand, ok bool) {
	sess := session.Identity()
	r.commands.mu.Lock()
	defer r.commands.mu.Unlock()
	for rc := range r.commands.all {
		if rc.SessionID == sess.ID && (!ok || rc.StartedAt.Before(c.StartedAt)) {
			c, ok = *rc, true
		}
	}
	return c, ok
}
