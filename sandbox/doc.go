// Package sandbox runs a person's commands and shells as an unprivileged
// user unique to their session, each in a jail of its own, through one
// bounded runner.
//
// # The helper
//
// Go cannot run code in a child between fork and exec, so a sandboxed
// command starts as this same binary (/proc/self/exe) marked as the
// helper by an environment variable. The helper is package injail, which
// this package imports: it does its work from its package init, before
// the rest of the binary is set up, and exits there, so any binary that
// links this package is a helper when so marked, and nothing of the
// server's set-up (or of a test's) runs in it. Package init functions
// that run before it must stay free of side effects.
//
// # What a sandboxed command gets
//
// The helper is cloned as root into new mount, PID, IPC and UTS
// namespaces, so it is PID 1 of the command's PID namespace, with only its
// marker in the environment. On one locked OS thread (the network
// namespace, no_new_privs and capability sets are per thread, and a fork
// copies the calling thread's) it:
//
//   - joins the uid's memory and pids cgroups when cgroups are usable (a
//     spare helper, started ahead for one uid, has joined them while it
//     waited, at a low priority it leaves for its command);
//   - sets RLIMIT_NPROC (per uid, and the uid is the session's alone) and
//     RLIMIT_CORE 0;
//   - builds the jail (injail/jail_linux.go): a tmpfs root holding read-only
//     binds of Config.ROPaths, the checkout at /workspace, the session's
//     HOME at /home/atelier and its /tmp, the project's cache at
//     /home/atelier/.cache (cache_linux.go), a minimal /dev with a private
//     devpts and a small /dev/shm, /proc of the PID namespace, and
//     generated /etc/passwd and /etc/group naming the uid atelier and a
//     resolv.conf of the network policy (resolv_linux.go); it
//     pivots into it and detaches the host's root. A host that cannot
//     build it makes New log why and every command fail with
//     ErrUnavailable;
//   - for Network deny, unshares a network namespace and brings lo up (a
//     spare was cloned into one and brought its lo up while it waited), or
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
//   - enters Dir (/workspace/<folder>) as the user, resets ignored signals
//     to their defaults, and starts the command as its child, in a session
//     of its own, with only PATH, HOME, LANG=C.UTF-8, TERM and the
//     variables that point the usual tools' caches into HOME/.cache;
//     without a memory cgroup the child gets RLIMIT_DATA (not RLIMIT_AS,
//     which breaks Go and JVM tools that reserve address space) through
//     util-linux's prlimit, which sets it and then execs the command;
//   - stays as PID 1: passes SIGTERM, SIGINT and SIGHUP on to the
//     namespace, reaps orphans, and exits with the command's status once
//     it has exited, which makes the kernel kill the rest of the
//     namespace.
//
// Its failure before the command starts comes back over a socket as a
// Start error; the same socket carries the signal that ended the command.
//
// # Ending a command
//
// After the main process exits, or when it is stopped (timeout, cancel,
// overflow: SIGTERM, then SIGKILL a second later), every process of its
// tree is killed before Run returns; so a background child that holds the
// output pipes cannot make Run hang, and nothing of the command outlives
// it. For a sandboxed command the tree is its PID namespace, so the
// session's other commands and shells live on; KillAll ends everything of
// a uid, for the session's end.
package sandbox
