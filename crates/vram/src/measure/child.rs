//! A command in its own process group, supervised so that nothing it does can hang vram: its
//! pipes are pumped as raw bytes on their own threads (never waited on past a deadline), and
//! when the command exits whatever it left behind in its group (a logger, `nohup … &`) is ended,
//! SIGTERM first, then SIGKILL.

use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

/// How long the command's leftovers get to finish on their own after it exits (a logger
/// flushing) before they are sent SIGTERM.
pub const GRACE: Duration = Duration::from_millis(500);
/// How long SIGTERM gets before SIGKILL.
pub const TERM_WAIT: Duration = Duration::from_secs(1);
/// How long vram waits for a pipe's last bytes once the command's group is gone; a process that
/// escaped the group (setsid) may hold it open for ever. The pipe normally closes at once; the
/// wait only bounds that escaped case. 500 ms can lose a trial's last lines (its peak report) when a
/// loaded machine does not schedule the reader in time: the likely cause of a loaded CI run's
/// `vram tune` choosing batch 29 of about 62 (cli::tune_finds_the_batch_with_a_real_child).
pub const PIPE_WAIT: Duration = Duration::from_secs(5);

/// Start `cmd` as the leader of a new process group (so a terminal's Ctrl-C reaches vram only,
/// and the whole job can be signalled at once).
pub fn spawn(cmd: &[String], stdin: Stdio, stdout: Stdio, stderr: Stdio) -> Result<Child> {
    spawn_env(cmd, &[], stdin, stdout, stderr)
}

/// [`spawn`] with extra environment variables for the command.
pub fn spawn_env(cmd: &[String], env: &[(String, String)], stdin: Stdio, stdout: Stdio, stderr: Stdio) -> Result<Child> {
    let (program, args) = cmd.split_first().ok_or_else(|| crate::resolve::UsageError("a command is needed after `--`".into()))?;
    Command::new(program)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(stdin)
        .stdout(stdout)
        .stderr(stderr)
        .process_group(0)
        .spawn()
        .with_context(|| format!("cannot start `{program}`"))
}

/// A pipe being read on its own thread.
pub struct Pump {
    done: mpsc::Receiver<()>,
}

/// Read `from` in chunks as they come (no waiting for a newline) and hand each to `sink`, until
/// end of file or a read error, which `sink` is told of with one empty chunk.
pub fn pump<R: Read + Send + 'static>(mut from: R, mut sink: impl FnMut(&[u8]) + Send + 'static) -> Pump {
    let (tx, done) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 8192];
        loop {
            match from.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => sink(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        sink(&[]);
        let _ = tx.send(());
    });
    Pump { done }
}

impl Pump {
    /// Wait until the pipe is drained or `deadline`; true when drained. A reader still blocked
    /// after the deadline is left behind (it ends with vram).
    pub fn finish(&self, deadline: Instant) -> bool {
        let left = deadline.saturating_duration_since(Instant::now());
        !matches!(self.done.recv_timeout(left), Err(mpsc::RecvTimeoutError::Timeout))
    }
}

/// Whether any process of group `pgid` is still running. A zombie does not count: an orphan's
/// zombie waits for whoever adopted it (PID 1, which in a container may reap late or never).
pub fn group_alive(pgid: i32) -> bool {
    // SAFETY: kill with signal 0 only checks for existence and permission.
    if pgid <= 0 || unsafe { libc::kill(-pgid, 0) } != 0 {
        return false;
    }
    let Ok(dir) = std::fs::read_dir("/proc") else { return true };
    let running = |stat: &str| parse_stat(stat).is_some_and(|(state, group)| group == pgid && state != 'Z' && state != 'X');
    dir.flatten()
        .filter(|e| e.file_name().to_str().is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit())))
        .any(|e| std::fs::read_to_string(e.path().join("stat")).is_ok_and(|s| running(&s)))
}

/// (state, process group) from the text of `/proc/<pid>/stat` (proc(5): `pid (comm) state ppid pgrp …`;
/// comm may contain spaces and parentheses, so fields are counted after its last `)`).
fn parse_stat(stat: &str) -> Option<(char, i32)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut f = rest.split_whitespace();
    let state = f.next()?.chars().next()?;
    let _ppid = f.next()?;
    Some((state, f.next()?.parse().ok()?))
}

/// Send `sig` to every process of group `pgid`.
pub fn signal_group(pgid: i32, sig: i32) {
    if pgid > 0 {
        // SAFETY: a plain kill(2) on a process group vram created.
        unsafe { libc::kill(-pgid, sig) };
    }
}

fn wait_gone(pgid: i32, within: Duration) -> bool {
    let until = Instant::now() + within;
    while group_alive(pgid) {
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// What was left of the command's group after it exited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leftovers {
    /// Nothing: the group ended with its leader.
    None,
    /// Processes that ended within the grace period.
    Finished,
    /// Processes ended by SIGTERM.
    Terminated,
    /// Processes that needed SIGKILL.
    Killed,
}

/// Once the leader has exited (and been reaped): give its group `grace`, then SIGTERM, then
/// SIGKILL. Bounded: returns after at most grace + 2 × TERM_WAIT (a zombie nobody reaps can keep
/// a group "alive" that long).
pub fn end_group(pgid: i32, grace: Duration) -> Leftovers {
    if !group_alive(pgid) {
        return Leftovers::None;
    }
    if wait_gone(pgid, grace) {
        return Leftovers::Finished;
    }
    signal_group(pgid, libc::SIGTERM);
    if wait_gone(pgid, TERM_WAIT) {
        return Leftovers::Terminated;
    }
    signal_group(pgid, libc::SIGKILL);
    wait_gone(pgid, TERM_WAIT);
    Leftovers::Killed
}

impl Leftovers {
    /// A line for the report, if anything was left.
    pub fn describe(self) -> Option<&'static str> {
        match self {
            Leftovers::None | Leftovers::Finished => None,
            Leftovers::Terminated => Some("the command left processes running in its group after it exited; vram ended them (SIGTERM)"),
            Leftovers::Killed => {
                Some("the command left processes running in its group after it exited; vram ended them (SIGTERM, then SIGKILL)")
            }
        }
    }
}

/// The name of a signal, for messages.
pub fn signal_name(sig: i32) -> Option<&'static str> {
    Some(match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        _ => return None,
    })
}

/// "code 3", "killed by signal 9 (SIGKILL)".
pub fn describe_exit(code: Option<i32>, signal: Option<i32>) -> String {
    match (code, signal) {
        (Some(c), _) => format!("code {c}"),
        (None, Some(s)) => match signal_name(s) {
            Some(n) => format!("killed by signal {s} ({n})"),
            None => format!("killed by signal {s}"),
        },
        (None, None) => "an unknown status".into(),
    }
}

/// [`describe_exit`] of a status.
pub fn describe_status(s: &ExitStatus) -> String {
    describe_exit(s.code(), s.signal())
}

/// The shell convention for an exit status: the code, or 128 + the signal.
pub fn shell_code(s: &ExitStatus) -> i32 {
    s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0))
}

/// Splits a byte stream into lines (on `\n` or `\r`, so progress bars count), decoded lossily;
/// a line longer than `max` bytes is handed over in `max`-byte pieces, so memory stays bounded
/// whatever the child prints.
pub struct Lines {
    buf: Vec<u8>,
    max: usize,
}

impl Lines {
    /// A splitter holding at most `max` bytes of an unfinished line.
    pub fn new(max: usize) -> Lines {
        Lines { buf: Vec::new(), max: max.max(1) }
    }

    /// Feed a chunk; `line` gets every line it completes. An empty chunk (the end of a
    /// [`pump`]) finishes the last line.
    pub fn feed(&mut self, chunk: &[u8], line: &mut dyn FnMut(&str)) {
        if chunk.is_empty() {
            return self.finish(line);
        }
        for &b in chunk {
            if b == b'\n' || b == b'\r' {
                if !self.buf.is_empty() {
                    line(&String::from_utf8_lossy(&self.buf));
                    self.buf.clear();
                }
            } else {
                self.buf.push(b);
                if self.buf.len() >= self.max {
                    line(&String::from_utf8_lossy(&self.buf));
                    self.buf.clear();
                }
            }
        }
    }

    /// The unfinished last line, if any.
    pub fn finish(&mut self, line: &mut dyn FnMut(&str)) {
        if !self.buf.is_empty() {
            line(&String::from_utf8_lossy(&self.buf));
            self.buf.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_split_on_newlines_and_carriage_returns_and_stay_bounded() {
        let mut got = Vec::new();
        let mut l = Lines::new(4);
        l.feed(b"ab\xffc\r12", &mut |s| got.push(s.to_string()));
        l.feed(b"\nxyzuvw", &mut |s| got.push(s.to_string()));
        l.feed(b"", &mut |s| got.push(s.to_string()));
        assert_eq!(got, ["ab\u{fffd}c", "12", "xyzu", "vw"]);
    }

    #[test]
    fn stat_lines() {
        assert_eq!(parse_stat("4242 (a) b) c) S 1 4240 4240 0 -1"), Some(('S', 4240)));
        assert_eq!(parse_stat("7 (sleep) Z 1 7 7"), Some(('Z', 7)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn signal_deaths_are_named() {
        assert_eq!(describe_exit(None, Some(9)), "killed by signal 9 (SIGKILL)");
        assert_eq!(describe_exit(Some(3), None), "code 3");
        assert_eq!(describe_exit(None, Some(13)), "killed by signal 13 (SIGPIPE)");
    }

    #[test]
    fn a_background_grandchild_is_ended_and_its_pipe_not_waited_for() {
        let cmd: Vec<String> = ["sh", "-c", "sleep 1001 & exit 0"].iter().map(|s| s.to_string()).collect();
        let mut child = spawn(&cmd, Stdio::null(), Stdio::piped(), Stdio::null()).unwrap();
        let out = pump(child.stdout.take().unwrap(), |_| {});
        let pgid = child.id() as i32;
        let status = child.wait().unwrap();
        assert!(status.success());
        let t = Instant::now();
        let left = end_group(pgid, Duration::from_millis(100));
        assert_eq!(left, Leftovers::Terminated);
        assert!(out.finish(Instant::now() + PIPE_WAIT), "the pipe closes once the group is gone");
        assert!(t.elapsed() < Duration::from_secs(3));
        assert!(!group_alive(pgid));
    }
}
