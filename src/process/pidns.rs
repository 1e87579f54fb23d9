//! A detached turn's command in a PID namespace of its own, so that nothing of it outlives its
//! runner, however the runner dies (spec/containment.md, "A PID namespace per turn").
//!
//! The runner `clone`s a child with `CLONE_NEWPID`: the child is pid 1 (the *init*) of a new
//! namespace, and when it dies the kernel SIGKILLs every other process of that namespace and lets
//! the init's parent reap it only once they are all gone (`zap_pid_namespace`). The init arms
//! `PR_SET_PDEATHSIG = SIGKILL`, so the runner's death, a SIGKILL included, kills the whole tree
//! with no repair and no guard needed.
//!
//! The user's command is not pid 1 (pid 1 ignores every signal it has no handler for, so a
//! cancel's SIGTERM would not reach a command that is): the init forks it (pid 2), forwards the
//! cancel's signals to every other process of the namespace (`kill(-1, …)`), reaps everything,
//! writes the command's raw wait status to a pipe the runner reads, and, once the command has
//! exited, gives what it left behind SIGTERM and [`crate::process::work::WORK_TERM_GRACE_MILLIS`]
//! before it exits (the kernel then SIGKILLs the rest).
//!
//! Both children run in memory forked from the multi-threaded runner, so they only make raw
//! syscalls on data prepared before the `clone` (no allocation, no lock, not even glibc's `fork`,
//! whose atfork handlers take malloc's locks). `TOLLGATE_PIDNS=1` asks for it; a `clone` refused
//! (not root: `CLONE_NEWPID` needs `CAP_SYS_ADMIN`) falls back to today's containment, logged once.

use std::ffi::{CString, OsStr, OsString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

/// `TOLLGATE_PIDNS=1`: start a detached turn's command in a PID namespace of its own.
pub const PIDNS_ENV: &str = "TOLLGATE_PIDNS";

/// Whether this process was asked to start turns in their own PID namespace.
pub fn wanted() -> bool {
    std::env::var_os(PIDNS_ENV).is_some_and(|v| v == "1")
}

/// What the forked children need, all prepared before the `clone`.
pub struct InitSpec {
    /// The paths `execve` tries in order (the program, or its `PATH` candidates).
    candidates: Vec<CString>,
    argv: Vec<CString>,
    envp: Vec<CString>,
    cwd: Option<CString>,
    /// The cgroup's `cgroup.procs` the init joins before it forks the command, when it could
    /// not be born inside `group`.
    pub join: Option<CString>,
    /// The work's group the init is born into (clone3 `CLONE_INTO_CGROUP`) where the kernel can.
    pub group: Option<std::path::PathBuf>,
    /// A wait before the parent-death signal is armed (the failpoint of the spawn window).
    pub hold: Option<Duration>,
    /// How long leftovers of an exited command get between SIGTERM and the init's exit.
    pub grace_millis: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum PidnsError {
    /// The kernel refused the namespace (not privileged, or no PID namespaces): fall back.
    #[error("cannot create a PID namespace: {0}")]
    Refused(std::io::Error),
    /// The command could not be started (its `execve`, `chdir`, or a descriptor failed).
    #[error("{0}")]
    Start(std::io::Error),
}

/// A started init: its pid (in this namespace), the read ends of the command's output, and the
/// pipe that carries the command's wait status.
pub struct Started {
    pub init: nix::unistd::Pid,
    pub stdout: std::fs::File,
    pub stderr: std::fs::File,
    pub status: OwnedFd,
    /// Whether the init was born inside `spec.group` (else it moved itself in with `join`).
    pub born_in_group: bool,
}

impl InitSpec {
    /// The command `argv` with exactly the environment `env`, run in `cwd`. A program without a
    /// `/` is looked up in the `PATH` of `env` (else this process's, else the usual default), as
    /// `execvp` does.
    pub fn new(
        argv: &[OsString],
        env: &[(OsString, OsString)],
        cwd: Option<&Path>,
    ) -> Result<Self, PidnsError> {
        let c = |bytes: &[u8]| {
            CString::new(bytes).map_err(|_| {
                PidnsError::Start(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "a NUL byte in the command",
                ))
            })
        };
        let program = argv.first().ok_or_else(|| {
            PidnsError::Start(std::io::Error::other("the turn has an empty command"))
        })?;
        let path: std::ffi::OsString = env
            .iter()
            .rev()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.clone())
            .or_else(|| std::env::var_os("PATH"))
            .unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
        let candidates = super::exec_search::candidates(program, &path)
            .iter()
            .map(|candidate| c(candidate.as_os_str().as_bytes()))
            .collect::<Result<Vec<_>, _>>()?;
        let argv = argv
            .iter()
            .map(|a| c(a.as_bytes()))
            .collect::<Result<_, _>>()?;
        let envp = env
            .iter()
            .map(|(k, v)| c(&[k.as_bytes(), b"=", v.as_bytes()].concat()))
            .collect::<Result<_, _>>()?;
        let cwd = cwd.map(|d| c(OsStr::as_bytes(d.as_os_str()))).transpose()?;
        Ok(InitSpec {
            candidates,
            argv,
            envp,
            cwd,
            join: None,
            group: None,
            hold: None,
            grace_millis: crate::process::work::WORK_TERM_GRACE_MILLIS,
        })
    }
}

fn pipe_cloexec() -> std::io::Result<(OwnedFd, OwnedFd)> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(std::io::Error::from)
}

/// The raw `clone` with fork semantics (no shared memory, `SIGCHLD` to the parent), `extra`
/// added to the flags. Returns the child's pid in the parent, 0 in the child.
fn raw_fork(extra: libc::c_int) -> libc::c_long {
    let flags = (extra | libc::SIGCHLD) as libc::c_ulong;
    // SAFETY: clone without CLONE_VM and without a new stack behaves as fork(2): the child gets
    // a copy of the address space and continues on its copy of the stack. The callers run only
    // raw syscalls in the child.
    unsafe { libc::syscall(libc::SYS_clone, flags, 0usize, 0usize, 0usize, 0usize) }
}

/// `CLONE_INTO_CGROUP` (Linux 5.7): the child starts as a member of the group whose directory
/// descriptor is `clone_args.cgroup`.
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// `struct clone_args` of clone3(2), up to its `cgroup` field (`CLONE_ARGS_SIZE_VER2`).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// [`raw_fork`] through clone3(2) with `CLONE_INTO_CGROUP`: the child is born a member of the
/// group `cgroup` (an open directory of it), so it never has to move itself in. A move (a write
/// to `cgroup.procs`) takes the kernel's cgroup thread-group lock for writing, which waits for an
/// RCU grace period: 8 to 20 ms of wall time per turn on the CI machine, against about 1 ms for
/// the spawn itself (spec/containment.md). Returns the pid in the parent, 0 in the child, or the
/// errno when the kernel refused (no clone3 or no `CLONE_INTO_CGROUP`: `ENOSYS`, `E2BIG`,
/// `EINVAL`; a group that cannot take the process: `EBUSY`, `EACCES`, `EPERM`, `ENOENT`, ...).
fn raw_fork_into(extra: libc::c_int, cgroup: RawFd) -> Result<libc::c_long, libc::c_int> {
    let args = CloneArgs {
        flags: extra as u64 | CLONE_INTO_CGROUP,
        exit_signal: libc::SIGCHLD as u64,
        cgroup: cgroup as u64,
        ..CloneArgs::default()
    };
    // SAFETY: clone3 without CLONE_VM and with no stack given behaves as fork(2), as in
    // `raw_fork`; `args` is a valid clone_args of the size passed, alive for the call. The
    // callers run only raw syscalls in the child.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            std::ptr::addr_of!(args),
            std::mem::size_of::<CloneArgs>(),
        )
    };
    if pid < 0 {
        return Err(last_errno());
    }
    Ok(pid)
}

/// A directory descriptor of the group `dir` for [`raw_fork_into`].
fn open_group(dir: &Path) -> std::io::Result<OwnedFd> {
    nix::fcntl::open(
        dir,
        nix::fcntl::OFlag::O_RDONLY | nix::fcntl::OFlag::O_DIRECTORY | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    // SAFETY: `open` returned a new descriptor that nothing else owns.
    .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) })
    .map_err(std::io::Error::from)
}

/// A turn's command started straight into its work's group (no PID namespace): its pid, and the
/// read ends of its output.
pub struct Direct {
    pub pid: nix::unistd::Pid,
    pub stdout: std::fs::File,
    pub stderr: std::fs::File,
}

/// Why [`spawn_into`] started nothing.
#[derive(Debug, thiserror::Error)]
pub enum DirectError {
    /// clone3 into the group was refused (an older kernel, or a group that cannot take the
    /// process): nothing was started, the caller starts the command its usual way.
    #[error("cannot start a process inside the group: {0}")]
    Refused(std::io::Error),
    /// The command could not be started (its `execve`, `chdir`, or a descriptor failed).
    #[error("{0}")]
    Start(std::io::Error),
}

/// Starts `spec`'s command as a direct child of this process, born inside the group `group`
/// (clone3 `CLONE_INTO_CGROUP`), the leader of a new process group (its pid), stdin from
/// `/dev/null` and its output into two pipes. The child does what the runner's `pre_exec` hook
/// does on the other path: waits `spec.hold` (the failpoint), arms `PR_SET_PDEATHSIG = SIGKILL`
/// and refuses to exec if its parent died before that ([`crate::process::die_with_parent`]),
/// then execs as [`spawn`]'s command does. Returns when the command was exec'd or failed to be.
/// Dies with the calling *thread*: call it from the runner's main thread.
pub fn spawn_into(spec: &InitSpec, group: &Path) -> Result<Direct, DirectError> {
    let start = DirectError::Start;
    let group = open_group(group).map_err(DirectError::Refused)?;
    let (out_r, out_w) = pipe_cloexec().map_err(start)?;
    let (err_r, err_w) = pipe_cloexec().map_err(start)?;
    let (fail_r, fail_w) = pipe_cloexec().map_err(start)?;
    let null = std::fs::File::open("/dev/null").map_err(start)?;
    let ptrs = |v: &[CString]| {
        let mut p: Vec<*const libc::c_char> = v.iter().map(|s| s.as_ptr()).collect();
        p.push(std::ptr::null());
        p
    };
    let argv = ptrs(&spec.argv);
    let envp = ptrs(&spec.envp);
    let fds = ChildFds {
        null: null.as_raw_fd(),
        out: out_w.as_raw_fd(),
        err: err_w.as_raw_fd(),
        fail: fail_w.as_raw_fd(),
        status: -1,
        me: -1,
    };
    let parent = nix::unistd::getpid().as_raw();
    // As in `spawn`: the runner's handlers must never run in the child before its exec.
    use nix::sys::signal::{pthread_sigmask, SigSet, SigmaskHow};
    let mut old = SigSet::empty();
    pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&SigSet::all()), Some(&mut old))
        .map_err(|e| start(e.into()))?;
    let pid = raw_fork_into(0, group.as_raw_fd());
    if pid == Ok(0) {
        direct_child(spec, &argv, &envp, &fds, parent);
    }
    let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
    let pid =
        pid.map_err(|errno| DirectError::Refused(std::io::Error::from_raw_os_error(errno)))?;
    let pid = nix::unistd::Pid::from_raw(pid as libc::pid_t);
    drop((out_w, err_w, fail_w, null, group));
    // EOF: the command was exec'd (the pipe is close-on-exec). Four bytes: the errno of what failed.
    let mut errno = [0u8; 4];
    let mut file = std::fs::File::from(fail_r);
    if read_full(&mut file, &mut errno) == 4 {
        let _ = nix::sys::wait::waitpid(pid, None);
        return Err(start(std::io::Error::from_raw_os_error(
            i32::from_ne_bytes(errno),
        )));
    }
    Ok(Direct {
        pid,
        stdout: std::fs::File::from(out_r),
        stderr: std::fs::File::from(err_r),
    })
}

/// The first steps of both children of a clone (the direct command and the namespace's init):
/// wait out `spec.hold` (the failpoint's window), then arm `PR_SET_PDEATHSIG = SIGKILL`, so the
/// parent's death, from this point on, kills the child. Raw syscalls only; on failure the errno
/// goes to the parent through `fds.fail` and the child exits.
fn hold_then_die_with_parent(spec: &InitSpec, fds: &ChildFds) {
    // SAFETY: raw, async-signal-safe syscalls on a stack value; nothing allocates or locks.
    unsafe {
        if let Some(hold) = spec.hold {
            let ts = libc::timespec {
                tv_sec: hold.as_secs() as libc::time_t,
                tv_nsec: hold.subsec_nanos() as libc::c_long,
            };
            libc::nanosleep(&ts, std::ptr::null_mut());
        }
        if libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        ) != 0
        {
            fail_child(fds.fail, last_errno());
        }
    }
}

/// The child of [`spawn_into`]. Raw syscalls only (see the module's comment).
fn direct_child(
    spec: &InitSpec,
    argv: &[*const libc::c_char],
    envp: &[*const libc::c_char],
    fds: &ChildFds,
    parent: libc::pid_t,
) -> ! {
    // SAFETY: raw, async-signal-safe syscalls on data prepared before the clone, as in
    // `init_main`.
    unsafe {
        hold_then_die_with_parent(spec, fds);
        // The parent may have died before the signal was armed: then we were reparented.
        if libc::getppid() != parent {
            fail_child(fds.fail, libc::ESRCH);
        }
        if libc::setpgid(0, 0) != 0 {
            fail_child(fds.fail, last_errno());
        }
        exec_command(spec, argv, envp, fds)
    }
}

/// Starts the init of a new PID namespace, which starts `spec`'s command. The init leads a new
/// process group (its pid) and dies with the calling *thread*: call this from the thread that
/// lives as long as this process (the runner's main thread).
pub fn spawn(spec: &InitSpec) -> Result<Started, PidnsError> {
    let start = PidnsError::Start;
    let (out_r, out_w) = pipe_cloexec().map_err(start)?;
    let (err_r, err_w) = pipe_cloexec().map_err(start)?;
    let (fail_r, fail_w) = pipe_cloexec().map_err(start)?;
    let (status_r, status_w) = pipe_cloexec().map_err(start)?;
    let null = std::fs::File::open("/dev/null").map_err(start)?;
    let group = spec.group.as_deref().and_then(|g| open_group(g).ok());
    let me = crate::watch::pidfd_open(std::process::id())
        .map_err(|e| PidnsError::Refused(std::io::Error::from(e)))?;
    let ptrs = |v: &[CString]| {
        let mut p: Vec<*const libc::c_char> = v.iter().map(|s| s.as_ptr()).collect();
        p.push(std::ptr::null());
        p
    };
    let argv = ptrs(&spec.argv);
    let envp = ptrs(&spec.envp);
    let fds = ChildFds {
        null: null.as_raw_fd(),
        out: out_w.as_raw_fd(),
        err: err_w.as_raw_fd(),
        fail: fail_w.as_raw_fd(),
        status: status_w.as_raw_fd(),
        me: me.as_raw_fd(),
    };
    // The children start with every signal blocked: the runner's own handlers (its cancel flag and
    // self-pipe) must never run in them. The init waits for its signals with `sigtimedwait`.
    use nix::sys::signal::{pthread_sigmask, SigSet, SigmaskHow};
    let mut old = SigSet::empty();
    pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&SigSet::all()), Some(&mut old))
        .map_err(|e| start(e.into()))?;
    // Born into the work's group where the kernel can (no move, no wait for the cgroup lock);
    // else forked and moved in by the init itself (`init_main`, `join`).
    let born_in = group
        .as_ref()
        .map(|g| raw_fork_into(libc::CLONE_NEWPID, g.as_raw_fd()));
    let (pid, clone_error, joined) = match born_in {
        Some(Ok(pid)) => (pid, std::io::Error::from_raw_os_error(0), true),
        Some(Err(_)) | None => {
            let pid = raw_fork(libc::CLONE_NEWPID);
            (pid, std::io::Error::last_os_error(), false)
        }
    };
    if pid == 0 {
        init_main(spec, &argv, &envp, &fds, joined);
    }
    let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
    if pid < 0 {
        return Err(PidnsError::Refused(clone_error));
    }
    let init = nix::unistd::Pid::from_raw(pid as libc::pid_t);
    drop((out_w, err_w, fail_w, status_w, null, me, group));
    // EOF: the command was exec'd (the pipe is close-on-exec) or the init died before it forked
    // (the runner then reads the init's own status). Four bytes: the errno of what failed.
    let mut errno = [0u8; 4];
    let mut file = std::fs::File::from(fail_r);
    if read_full(&mut file, &mut errno) == 4 {
        let _ = nix::sys::wait::waitpid(init, None);
        return Err(start(std::io::Error::from_raw_os_error(
            i32::from_ne_bytes(errno),
        )));
    }
    Ok(Started {
        init,
        stdout: std::fs::File::from(out_r),
        stderr: std::fs::File::from(err_r),
        status: status_r,
        born_in_group: joined,
    })
}

/// Reads until `buf` is full or EOF; returns how many bytes were read.
fn read_full(file: &mut std::fs::File, buf: &mut [u8]) -> usize {
    use std::io::Read;
    let mut got = 0;
    while got < buf.len() {
        match file.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    got
}

/// The command's raw wait status from the init's status pipe, once the init wrote it (`None`:
/// not yet, or the init died first). Does not block when `fd` is readable or its writer gone.
pub fn read_status(fd: &OwnedFd) -> Option<nix::sys::wait::WaitStatus> {
    let mut buf = [0u8; 4];
    // The descriptor stays ours: the File is forgotten, not dropped.
    // SAFETY: `fd` is a valid open descriptor owned by the caller for this call's duration.
    let mut file =
        std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(fd.as_raw_fd()) });
    if read_full(&mut file, &mut buf) != 4 {
        return None;
    }
    nix::sys::wait::WaitStatus::from_raw(nix::unistd::Pid::from_raw(2), i32::from_ne_bytes(buf))
        .ok()
}

struct ChildFds {
    null: RawFd,
    out: RawFd,
    err: RawFd,
    fail: RawFd,
    status: RawFd,
    me: RawFd,
}

/// Reports `errno` on the failure pipe and exits: in a forked child only.
fn fail_child(fd: RawFd, errno: libc::c_int) -> ! {
    let bytes = errno.to_ne_bytes();
    // SAFETY: write and _exit are async-signal-safe; the buffer lives on this stack.
    unsafe {
        libc::write(fd, bytes.as_ptr().cast(), bytes.len());
        libc::_exit(127)
    }
}

fn last_errno() -> libc::c_int {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// The signals the init passes on to the rest of its namespace.
const FORWARDED: [libc::c_int; 6] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

/// pid 1 of the new namespace. Raw syscalls only (see the module's comment).
fn init_main(
    spec: &InitSpec,
    argv: &[*const libc::c_char],
    envp: &[*const libc::c_char],
    fds: &ChildFds,
    joined: bool,
) -> ! {
    // SAFETY: every call below is a raw, async-signal-safe syscall on descriptors and
    // NUL-terminated strings prepared before the clone; nothing allocates or takes a lock.
    unsafe {
        hold_then_die_with_parent(spec, fds);
        // The runner may have died before the signal was armed: its pidfd is readable then.
        let mut me = libc::pollfd {
            fd: fds.me,
            events: libc::POLLIN,
            revents: 0,
        };
        if libc::poll(&mut me, 1, 0) != 0 {
            libc::_exit(1);
        }
        // Its command line is the runner's (a fork, no exec); its name says what it is.
        libc::prctl(
            libc::PR_SET_NAME,
            c"tollgate-init".as_ptr() as libc::c_ulong,
            0,
            0,
            0,
        );
        if let Some(procs) = spec.join.as_ref().filter(|_| !joined) {
            crate::process::containment::cgroup::join_in_child(procs);
        }
        // Its own process group in the runner's namespace: the unit's, which the runner records.
        libc::setpgid(0, 0);
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        let command = raw_fork(0);
        if command == 0 {
            exec_command(spec, argv, envp, fds);
        }
        if command < 0 {
            fail_child(fds.fail, last_errno());
        }
        // Keep only the status pipe (as descriptor 3): nothing the runner holds open (its store's
        // files, their locks, the output pipes) stays open in the init.
        let status = if fds.status == 3 {
            3
        } else {
            libc::dup2(fds.status, 3)
        };
        libc::syscall(libc::SYS_close_range, 4u32, u32::MAX, 0u32);
        for fd in [0, 1, 2] {
            libc::close(fd);
        }
        let mut command_status: Option<libc::c_int> = None;
        let mut deadline: Option<libc::timespec> = None;
        loop {
            loop {
                let mut raw: libc::c_int = 0;
                let r = libc::waitpid(-1, &mut raw, libc::WNOHANG | libc::__WALL);
                if r > 0 {
                    if r as libc::c_long == command {
                        command_status = Some(raw);
                        let bytes = raw.to_ne_bytes();
                        libc::write(status, bytes.as_ptr().cast(), bytes.len());
                    }
                    continue;
                }
                if r == 0 {
                    break;
                }
                if last_errno() == libc::EINTR {
                    continue;
                }
                // ECHILD: nothing is left in the namespace.
                libc::_exit(0);
            }
            let mut now: libc::timespec = std::mem::zeroed();
            libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now);
            if command_status.is_some() && deadline.is_none() {
                libc::kill(-1, libc::SIGTERM);
                let mut at = now;
                at.tv_sec += (spec.grace_millis / 1000) as libc::time_t;
                at.tv_nsec += ((spec.grace_millis % 1000) * 1_000_000) as libc::c_long;
                if at.tv_nsec >= 1_000_000_000 {
                    at.tv_sec += 1;
                    at.tv_nsec -= 1_000_000_000;
                }
                deadline = Some(at);
            }
            let mut wait = libc::timespec {
                tv_sec: 1,
                tv_nsec: 0,
            };
            if let Some(at) = deadline {
                let mut left_nanos = (at.tv_sec - now.tv_sec) as i64 * 1_000_000_000
                    + (at.tv_nsec - now.tv_nsec) as i64;
                if left_nanos <= 0 {
                    // The grace is over: the kernel SIGKILLs what is left as the init exits.
                    libc::_exit(0);
                }
                left_nanos = left_nanos.min(1_000_000_000);
                wait.tv_sec = (left_nanos / 1_000_000_000) as libc::time_t;
                wait.tv_nsec = (left_nanos % 1_000_000_000) as libc::c_long;
            }
            let signal = libc::sigtimedwait(&all, std::ptr::null_mut(), &wait);
            if FORWARDED.contains(&signal) {
                libc::kill(-1, signal);
            }
        }
    }
}

/// pid 2: the command. Its stdio, its directory, the signal state a spawned program expects (no
/// blocked signal, `SIGPIPE` at its default), then `execve` of each candidate path in turn.
fn exec_command(
    spec: &InitSpec,
    argv: &[*const libc::c_char],
    envp: &[*const libc::c_char],
    fds: &ChildFds,
) -> ! {
    // SAFETY: as in `init_main`: raw syscalls on data prepared before the clone.
    unsafe {
        for (from, to) in [(fds.null, 0), (fds.out, 1), (fds.err, 2)] {
            if libc::dup2(from, to) < 0 {
                fail_child(fds.fail, last_errno());
            }
        }
        if let Some(dir) = &spec.cwd {
            if libc::chdir(dir.as_ptr()) != 0 {
                fail_child(fds.fail, last_errno());
            }
        }
        // The runner's handlers (its cancel flag and self-pipe) are still installed until the
        // exec: a TERM or INT pending in the blocked mask must take its default action here,
        // not be swallowed by them.
        for signal in [libc::SIGPIPE, libc::SIGTERM, libc::SIGINT] {
            libc::signal(signal, libc::SIG_DFL);
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        let mut errno = libc::ENOENT;
        for path in &spec.candidates {
            libc::execve(path.as_ptr(), argv.as_ptr(), envp.as_ptr());
            match last_errno() {
                libc::ENOENT | libc::ENOTDIR => {}
                libc::EACCES => errno = libc::EACCES,
                other => fail_child(fds.fail, other),
            }
        }
        fail_child(fds.fail, errno)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect()
    }

    fn words(argv: &[&str]) -> Vec<OsString> {
        argv.iter().map(OsString::from).collect()
    }

    #[test]
    fn a_bare_program_is_looked_up_in_the_commands_own_path_as_execvp_does() {
        let argv = words(&["prog", "arg"]);
        let spec = InitSpec::new(&argv, &env(&[("PATH", "/a:/b/c:")]), None).expect("a spec");
        let candidates: Vec<&[u8]> = spec.candidates.iter().map(|c| c.to_bytes()).collect();
        assert_eq!(
            candidates,
            [&b"/a/prog"[..], &b"/b/c/prog"[..], &b"./prog"[..]]
        );
        assert_eq!(spec.envp[0].to_bytes(), b"PATH=/a:/b/c:");
        let spec = InitSpec::new(&words(&["./x/prog"]), &[], None).expect("a spec");
        assert_eq!(
            spec.candidates.len(),
            1,
            "a path with a slash is used as it is"
        );
    }

    /// A fresh group under this process's own v2 group, or `None` (printed) where none can be
    /// made here.
    fn fresh_group() -> Option<std::path::PathBuf> {
        use crate::process::containment::cgroup;
        let base = cgroup::base().filter(|b| cgroup::probe(b) == cgroup::Probe::Usable);
        let Some(base) = base else {
            eprintln!("SKIPPED the cgroup path: no delegable cgroup v2 group here");
            return None;
        };
        cgroup::create(&base, &cgroup::fresh_name()).ok()
    }

    fn output(mut file: std::fs::File) -> String {
        use std::io::Read;
        let mut text = String::new();
        file.read_to_string(&mut text)
            .expect("the command's output");
        text
    }

    #[test]
    fn a_command_spawned_into_a_group_is_born_in_it_and_leads_its_own_process_group() {
        let Some(group) = fresh_group() else { return };
        let argv = words(&[
            "sh",
            "-c",
            "cat /proc/self/cgroup; ps -o pgid= -p $$; pwd; echo \"$MARK\"; echo oops >&2",
        ]);
        let path = std::env::var("PATH").unwrap_or_default();
        let spec = InitSpec::new(
            &argv,
            &env(&[("PATH", &path), ("MARK", "m-1")]),
            Some(Path::new("/")),
        )
        .expect("a spec");
        let started = spawn_into(&spec, &group).expect("started inside the group");
        let out = output(started.stdout);
        let err = output(started.stderr);
        let status = nix::sys::wait::waitpid(started.pid, None).expect("reaped");
        let name = group.file_name().and_then(|n| n.to_str()).expect("a name");
        let mut lines = out.lines();
        let v2 = lines.find(|l| l.starts_with("0::")).expect("a v2 line");
        assert!(v2.ends_with(name), "born in {v2}, not in {name}");
        let pgid: i32 = lines
            .next()
            .expect("its pgid")
            .trim()
            .parse()
            .expect("a pgid");
        assert_eq!(pgid, started.pid.as_raw(), "it leads its own process group");
        assert_eq!(lines.next(), Some("/"), "its directory");
        assert_eq!(lines.next(), Some("m-1"), "exactly its environment");
        assert_eq!(err, "oops\n");
        assert_eq!(status, nix::sys::wait::WaitStatus::Exited(started.pid, 0));
        assert!(crate::process::containment::cgroup::remove_tree(&group));
    }

    #[test]
    fn a_command_that_cannot_be_exec_d_inside_a_group_reports_its_errno() {
        let Some(group) = fresh_group() else { return };
        let spec = InitSpec::new(&words(&["/nonexistent/prog"]), &[], None).expect("a spec");
        match spawn_into(&spec, &group) {
            Err(DirectError::Start(e)) => assert_eq!(e.raw_os_error(), Some(libc::ENOENT)),
            Err(other) => panic!("refused instead of failing to start: {other}"),
            Ok(_) => panic!("a missing program started"),
        }
        assert!(crate::process::containment::cgroup::remove_tree(&group));
        // A group that is gone is refused before anything starts: the caller falls back.
        assert!(matches!(
            spawn_into(&spec, &group),
            Err(DirectError::Refused(_))
        ));
    }

    #[test]
    fn a_nul_byte_or_an_empty_command_cannot_start() {
        assert!(matches!(
            InitSpec::new(&words(&["a\0b"]), &[], None),
            Err(PidnsError::Start(_))
        ));
        assert!(matches!(
            InitSpec::new(&[], &[], None),
            Err(PidnsError::Start(_))
        ));
    }
}
