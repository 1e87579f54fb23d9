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

use std::ffi::{CString, OsStr};
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
    /// The cgroup's `cgroup.procs` the init joins before it forks the command.
    pub join: Option<CString>,
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
}

impl InitSpec {
    /// The command `argv` with exactly the environment `env`, run in `cwd`. A program without a
    /// `/` is looked up in the `PATH` of `env` (else this process's, else the usual default), as
    /// `execvp` does.
    pub fn new(
        argv: &[String],
        env: &[(String, String)],
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
        let candidates = if program.contains('/') {
            vec![c(program.as_bytes())?]
        } else {
            let path = env
                .iter()
                .rev()
                .find(|(k, _)| k == "PATH")
                .map(|(_, v)| v.clone().into())
                .or_else(|| std::env::var_os("PATH"))
                .unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
            let mut list = Vec::new();
            for dir in std::env::split_paths(&path) {
                let dir = if dir.as_os_str().is_empty() {
                    Path::new(".").to_path_buf()
                } else {
                    dir
                };
                list.push(c(dir.join(program).as_os_str().as_bytes())?);
            }
            list
        };
        let argv = argv
            .iter()
            .map(|a| c(a.as_bytes()))
            .collect::<Result<_, _>>()?;
        let envp = env
            .iter()
            .map(|(k, v)| c(format!("{k}={v}").as_bytes()))
            .collect::<Result<_, _>>()?;
        let cwd = cwd.map(|d| c(OsStr::as_bytes(d.as_os_str()))).transpose()?;
        Ok(InitSpec {
            candidates,
            argv,
            envp,
            cwd,
            join: None,
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
    let pid = raw_fork(libc::CLONE_NEWPID);
    if pid == 0 {
        init_main(spec, &argv, &envp, &fds);
    }
    let clone_error = std::io::Error::last_os_error();
    let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
    if pid < 0 {
        return Err(PidnsError::Refused(clone_error));
    }
    let init = nix::unistd::Pid::from_raw(pid as libc::pid_t);
    drop((out_w, err_w, fail_w, status_w, null, me));
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
) -> ! {
    // SAFETY: every call below is a raw, async-signal-safe syscall on descriptors and
    // NUL-terminated strings prepared before the clone; nothing allocates or takes a lock.
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
        if let Some(procs) = &spec.join {
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
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
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

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_bare_program_is_looked_up_in_the_commands_own_path_as_execvp_does() {
        let argv = vec!["prog".to_string(), "arg".to_string()];
        let spec = InitSpec::new(&argv, &env(&[("PATH", "/a:/b/c:")]), None).expect("a spec");
        let candidates: Vec<&[u8]> = spec.candidates.iter().map(|c| c.to_bytes()).collect();
        assert_eq!(
            candidates,
            [&b"/a/prog"[..], &b"/b/c/prog"[..], &b"./prog"[..]]
        );
        assert_eq!(spec.envp[0].to_bytes(), b"PATH=/a:/b/c:");
        let spec = InitSpec::new(&["./x/prog".to_string()], &[], None).expect("a spec");
        assert_eq!(
            spec.candidates.len(),
            1,
            "a path with a slash is used as it is"
        );
    }

    #[test]
    fn a_nul_byte_or_an_empty_command_cannot_start() {
        assert!(matches!(
            InitSpec::new(&["a\0b".to_string()], &[], None),
            Err(PidnsError::Start(_))
        ));
        assert!(matches!(
            InitSpec::new(&[], &[], None),
            Err(PidnsError::Start(_))
        ));
    }
}
