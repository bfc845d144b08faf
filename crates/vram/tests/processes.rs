//! Hostile processes: commands that hang, leave background processes holding their pipes, print
//! bytes that are not UTF-8 or lines that never end, die of a signal, or ignore SIGTERM. Every
//! test is bounded in time: vram is killed past its limit and the test fails instead of hanging.

mod util;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(30);

/// What a bounded run of vram printed and returned.
struct Ran {
    code: Option<i32>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

/// Run vram with `args` (and `envs`) for at most LIMIT. Its output is collected on threads and
/// waited for at most 5 s after it exits, so a background process holding the pipes (the very
/// defect under test) fails the test instead of hanging it.
fn bounded(args: &[&str], envs: &[(&str, String)]) -> Ran {
    use std::io::Read;
    let mut child = Command::new(assert_cmd::cargo::cargo_bin("vram"))
        .args(args)
        .envs(envs.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let collect = |mut r: Box<dyn Read + Send>| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = r.read_to_end(&mut buf);
            let _ = tx.send(buf);
        });
        rx
    };
    let out = collect(Box::new(child.stdout.take().unwrap()));
    let err = collect(Box::new(child.stderr.take().unwrap()));
    let code = wait_bounded(&mut child, LIMIT);
    let take = |rx: std::sync::mpsc::Receiver<Vec<u8>>| rx.recv_timeout(Duration::from_secs(5)).unwrap_or_default();
    Ran { code, stdout: take(out), stderr: take(err) }
}

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hostile_train.sh")
}

/// A process that still runs (absent or a zombie counts as ended).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X'])))
}

fn pid_in(file: &Path) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(p) = std::fs::read_to_string(file).ok().and_then(|s| s.trim().parse().ok()) {
            return p;
        }
        assert!(Instant::now() < deadline, "no pid in {}", file.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The estimator's total for gpt2 at sequence 256, batch 4 (what `tune` expects of batch 4).
fn estimate_batch_4() -> u64 {
    let v = util::json(&["estimate", "-m", "gpt2", "-s", "256", "-b", "4"]);
    v["total_bytes"].as_u64().unwrap()
}

/// `vram tune` of gpt2 on 24 GiB, one trial at batch 4 (the global batch), measured by the
/// child's own report; returns (exit code, JSON report, stderr).
fn tune(mode_cmd: &[&str], envs: &[(&str, String)]) -> (Option<i32>, serde_json::Value, String) {
    let mut args = vec!["tune", "-m", "gpt2", "-s", "256", "-g", "24GiB", "--global-batch-size", "4", "--measure", "child-report"];
    args.extend(["--max-trials", "1", "--timeout", "5s", "--json", "--"]);
    args.extend(mode_cmd);
    let out = bounded(&args, envs);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {err}"));
    (out.code, v, err)
}

fn hostile(mode: &str) -> Vec<String> {
    vec![fixture().to_string_lossy().into_owned(), mode.into(), "{batch}".into()]
}

#[test]
fn tune_ends_a_trial_whose_background_process_holds_its_pipes() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let script = format!("sleep 1002 & echo $! > {}; echo VRAM_PEAK_BYTES=1000; echo {{batch}}; exit 0", pidfile.display());
    let t = Instant::now();
    let (code, v, err) = tune(&["sh", "-c", &script], &[]);
    assert!(t.elapsed() < Duration::from_secs(15), "took {:?}", t.elapsed());
    assert!(!running(pid_in(&pidfile)), "the background process was ended");
    assert!(err.contains("left processes running in its group"), "{err}");
    // 1000 bytes for gpt2 at batch 4 cannot be right: questioned, not extrapolated from.
    assert_eq!(v["trials"][0]["questioned"], true, "{v}");
    assert!(v["batch"].is_null(), "{v}");
    assert!(v["reason"].as_str().unwrap().contains("not trusted"), "{v}");
    assert_eq!(code, Some(1));
}

#[test]
fn tune_reads_a_trial_that_prints_bytes_that_are_not_utf8() {
    let est = estimate_batch_4();
    let (code, v, err) = tune(&hostile("non-utf8").iter().map(String::as_str).collect::<Vec<_>>(), &[("BASE", est.to_string())]);
    assert_eq!(v["trials"][0]["exit_code"], 0, "no SIGPIPE: {err}");
    assert_eq!(v["trials"][0]["peak"], est, "{err}");
    assert_eq!(v["batch"], 4, "{err}");
    assert!(err.contains("loss \u{fffd}\u{fffd} nan"), "decoded lossily: {err}");
    assert_eq!(code, Some(0));
}

#[test]
fn tune_reads_a_report_after_a_two_megabyte_line() {
    let est = estimate_batch_4();
    let (code, v, err) = tune(&hostile("long-line").iter().map(String::as_str).collect::<Vec<_>>(), &[("BASE", est.to_string())]);
    assert_eq!(v["trials"][0]["peak"], est, "{}", &err[err.len().saturating_sub(2000)..]);
    assert_eq!(code, Some(0));
}

#[test]
fn tune_names_the_signal_a_trial_died_of() {
    let (code, v, err) = tune(&hostile("signal").iter().map(String::as_str).collect::<Vec<_>>(), &[]);
    assert_eq!(v["trials"][0]["signal"], 9, "{v}");
    assert!(err.contains("exited with killed by signal 9 (SIGKILL)"), "{err}");
    assert_eq!(code, Some(1));
}

#[test]
fn tune_ends_on_sigterm_with_128_plus_the_signal() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    // The trial writes its background process's pid once it runs: the signal goes after that
    // event, not after a fixed sleep that a loaded machine may not have reached the trial by.
    let script = format!("sleep 600 & echo $! > {}; sleep 600 # {{batch}}", pidfile.display());
    let mut child = Command::new(assert_cmd::cargo::cargo_bin("vram"))
        .args(["tune", "-m", "gpt2", "-s", "256", "-g", "24GiB", "--measure", "child-report", "--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let background = pid_in(&pidfile);
    signal(&child, "TERM");
    // A hang guard, not a speed test: without the stop the trial would run for 600 s.
    assert_eq!(wait_bounded(&mut child, LIMIT), Some(128 + 15));
    assert!(!running(background), "the trial's whole group was ended");
}

fn signal(child: &Child, sig: &str) {
    assert!(Command::new("kill").args([&format!("-{sig}"), &child.id().to_string()]).status().unwrap().success());
}

/// Wait for `child` at most `limit` (then kill it and fail); its exit code.
fn wait_bounded(child: &mut Child, limit: Duration) -> Option<i32> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s.code();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("vram did not end within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn run_returns_when_the_command_exits_and_ends_what_it_left_behind() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let t = Instant::now();
    let script = format!("sleep 600 & echo $! > {}; exit 0", pidfile.display());
    let out = bounded(&["run", "--interval", "20ms", "--", "sh", "-c", &script], &[]);
    let took = t.elapsed();
    assert!(took < Duration::from_secs(20), "vram waited on what the command left behind: {took:?}");
    assert_eq!(out.code, Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    // The command's own duration, not the leftovers' clean-up (GRACE, then SIGTERM) after it.
    let secs: f64 = err
        .split("exited with code 0 after ")
        .nth(1)
        .and_then(|r| r.split(|c: char| !(c.is_ascii_digit() || c == '.')).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no duration: {err}"));
    assert!(secs < took.as_secs_f64() - 0.4, "{secs} s reported of {took:?}: {err}");
    assert!(err.contains("left processes running in its group"), "{err}");
    assert!(!running(pid_in(&pidfile)));
}

#[test]
fn run_ends_on_a_second_sigterm_when_the_command_ignores_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let ready = dir.path().join("ready");
    let script = format!("trap '' TERM; echo $$ > {}; sleep 600", ready.display());
    let mut child = Command::new(assert_cmd::cargo::cargo_bin("vram"))
        .args(["run", "--interval", "20ms", "--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = stderr_lines(&mut child);
    pid_in(&ready);
    signal(&child, "TERM");
    // The second signal goes once vram says it passed the first on (two signals sent together
    // could merge into one pending signal).
    let first = wait_for_line(&lines, "SIGTERM passed on to the command");
    signal(&child, "TERM");
    let code = wait_bounded(&mut child, LIMIT);
    let second = wait_for_line(&lines, "a second SIGTERM: killing");
    assert_eq!(code, Some(128 + 9), "killed, and vram says so: {first} / {second}");
}

/// The lines vram writes to stderr, as they come.
fn stderr_lines(child: &mut Child) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;
    let err = std::io::BufReader::new(child.stderr.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in err.lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// The first line containing `what`, waiting at most LIMIT for it.
fn wait_for_line(lines: &std::sync::mpsc::Receiver<String>, what: &str) -> String {
    let deadline = Instant::now() + LIMIT;
    loop {
        match lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(l) if l.contains(what) => return l,
            Ok(_) => {}
            Err(e) => panic!("vram did not say `{what}` within {LIMIT:?}: {e}"),
        }
    }
}

#[test]
fn run_passes_progress_bars_through_as_they_come() {
    use std::io::Read;
    let mut child = Command::new(assert_cmd::cargo::cargo_bin("vram"))
        .args(["run", "--interval", "20ms", "--", "sh", "-c", "printf 'progress 10%%\\r' >&2; sleep 3; printf 'done\\n' >&2"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = err.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut seen = Vec::new();
    while !String::from_utf8_lossy(&seen).contains("progress 10%\r") {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(chunk) => seen.extend(chunk),
            Err(_) => {
                let _ = child.kill();
                panic!("the progress bar was held back: {:?}", String::from_utf8_lossy(&seen));
            }
        }
    }
    assert_eq!(wait_bounded(&mut child, LIMIT), Some(0));
}

#[test]
fn run_checks_its_output_paths_before_running_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let touch = format!("touch {}", marker.display());
    let link = dir.path().join("dangling.json");
    std::os::unix::fs::symlink(dir.path().join("nowhere/r.json"), &link).unwrap();
    for (flag, path) in [("--out", dir.path().join("missing/r.json")), ("--svg", link.clone()), ("--timeline", dir.path().join("no/t.csv"))]
    {
        let out = bounded(&["run", flag, path.to_str().unwrap(), "--", "sh", "-c", &touch], &[]);
        assert_eq!(out.code, Some(2), "{flag} {}", path.display());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("does not exist") || err.contains("symbolic link to nothing"), "{err}");
        assert!(!marker.exists(), "the command did not run");
    }
}

#[test]
fn run_keeps_the_exit_code_and_the_report_when_writing_fails_afterwards() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("reports");
    std::fs::create_dir(&sub).unwrap();
    let (report, script) = (sub.join("r.json"), format!("rm -r {}; exit 5", sub.display()));
    let out = bounded(&["run", "--out", report.to_str().unwrap(), "--", "sh", "-c", &script], &[]);
    assert_eq!(out.code, Some(5), "the command's exit code, not vram's");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("the JSON report follows here instead"), "{err}");
    assert!(err.contains("\"exit_code\": 5"), "{err}");
}

#[test]
fn tune_does_not_choose_a_batch_from_a_reading_of_zero_bytes() {
    let args = ["tune", "-m", "qwen2.5-0.5b", "-g", "h100", "-s", "512", "--measure", "child-report", "--max-trials", "3", "--json"];
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--", "sh", "-c", "echo VRAM_PEAK_BYTES=0 # {batch}"]);
    let out = bounded(&all, &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {err}"));
    assert!(v["batch"].is_null(), "a 0-byte reading chose a batch: {v}");
    assert_eq!(v["trials"].as_array().unwrap().len(), 1, "not extrapolated from");
    assert!(err.contains("questioned"), "{err}");
    assert_eq!(out.code, Some(1));
}

/// An existing report file is never overwritten without `--force`, and the command does not run.
#[test]
fn run_never_overwrites_without_force() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run.json");
    std::fs::write(&out, "keep me").unwrap();
    let marker = dir.path().join("ran");
    let touch = format!("touch {}", marker.display());
    let o = util::vram().args(["run", "--out", out.to_str().unwrap(), "--", "sh", "-c", &touch]).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--force"));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "keep me");
    assert!(!marker.exists(), "the command ran although its report could not be written");
    let o = util::vram().args(["run", "--force", "--out", out.to_str().unwrap(), "--", "sh", "-c", &touch]).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(marker.exists());
    assert_ne!(std::fs::read_to_string(&out).unwrap(), "keep me");
}
