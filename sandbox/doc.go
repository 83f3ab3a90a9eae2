// Package sandbox runs the processes Atelier starts: a person's commands
// and shells as an unprivileged user unique to their session, and the
// server's own tools (RunPlain), all through one bounded runner.
//
// # Init comes first in main
//
// Every program that creates a Sandbox must call Init as the very first
// statement of main, and every test package that runs sandboxed commands
// must call it first in TestMain:
//
//	func main() {
//		sandbox.Init()
//		...
//	}
//
//	func TestMain(m *testing.M) {
//		sandbox.Init()
//		os.Exit(m.Run())
//	}
//
// Go cannot run code in a child between fork and exec, so a sandboxed
// command starts as this same binary (/proc/self/exe) marked as the init
// helper by an environment variable; Init in that process sets up the
// sandbox and execs the command, never returning. In any other process
// Init returns at once. New fails with ErrInitMissing when Init has not
// returned in the process, which stops a binary that forgot it from
// starting a second copy of itself as root. Package init functions run
// before main, in the helper too, so they must stay free of side effects.
//
// # What a sandboxed command gets
//
// The helper starts as root with only its marker in the environment and,
// on one locked OS thread (the namespace, no_new_privs and capability sets
// are per thread, and execve keeps the calling thread's):
//
//   - joins the uid's memory and pids cgroups when cgroups are usable;
//   - sets RLIMIT_NPROC (per uid, and the uid is the session's alone),
//     RLIMIT_CORE 0 and, without a memory cgroup, RLIMIT_DATA (not
//     RLIMIT_AS, which breaks Go and JVM tools that reserve address space);
//   - for Network deny, unshares a network namespace and brings lo up, or
//     refuses the command (ErrNetworkUnenforceable), never running open;
//     for Network allow, joins the namespace the server made for it behind
//     slirp4netns and an egress filter (egress_linux.go), or refuses
//     (ErrNetworkUnavailable), never running on the host's network;
//   - clears the ambient, bounding and inheritable capability sets, sets
//     no_new_privs, drops every supplementary group and sets the gid and
//     the uid (real, effective and saved);
//   - reads its own status back and refuses unless all ids are the
//     session's, no group is left, no_new_privs is 1 and every capability
//     set is empty;
//   - enters Dir as the user, resets ignored signals to their defaults,
//     and execs the command with only PATH, HOME, LANG=C.UTF-8 and TERM.
//
// The helper is a session leader (setsid), so the command has no access to
// the server's terminal. Its failure before the exec comes back over a
// close-on-exec socket as a Start error.
//
// # Ending a command
//
// After the main process exits, or when it is stopped (timeout, cancel,
// overflow: SIGTERM, then SIGKILL a second later), every process of its
// tree is killed before Run returns; so a background child that holds the
// output pipes cannot make Run hang, and nothing of the command outlives
// it. For a sandboxed command the tree is its uid (KillAll); for RunPlain
// it is its session and process group.
package sandbox
