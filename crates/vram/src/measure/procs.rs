//! Processes from /proc: parent links (to find a job's whole process tree), NSpid (NVML reports
//! host PIDs; a process in a container has a different PID inside), users, command lines, RSS.
//! Parsing is pure; the readers are thin.

use std::collections::{HashMap, HashSet};

/// What /proc/<pid>/status says about a process.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProcStatus {
    /// PID in this /proc's namespace.
    pub pid: u32,
    /// Parent PID.
    pub ppid: u32,
    /// Real UID.
    pub uid: u32,
    /// PIDs from this namespace to the innermost (NSpid); the last is the PID the process sees.
    pub nspid: Vec<u32>,
    /// Command name.
    pub name: String,
    /// Resident set size, bytes.
    pub rss: u64,
}

impl ProcStatus {
    /// The PID inside the process's own (innermost) namespace, when it differs.
    pub fn inner_pid(&self) -> Option<u32> {
        self.nspid.last().copied().filter(|p| *p != self.pid)
    }
}

/// Parse the text of /proc/<pid>/status.
pub fn parse_status(text: &str) -> Option<ProcStatus> {
    let mut s = ProcStatus::default();
    let mut have_pid = false;
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else { continue };
        let v = value.trim();
        match key {
            "Name" => s.name = v.to_string(),
            "Pid" => {
                s.pid = v.parse().ok()?;
                have_pid = true;
            }
            "PPid" => s.ppid = v.parse().ok()?,
            "Uid" => s.uid = v.split_whitespace().next()?.parse().ok()?,
            "NSpid" => s.nspid = v.split_whitespace().filter_map(|x| x.parse().ok()).collect(),
            "VmRSS" => s.rss = v.split_whitespace().next().and_then(|k| k.parse::<u64>().ok()).map_or(0, |k| k * 1024),
            _ => {}
        }
    }
    have_pid.then_some(s)
}

/// Every process visible in /proc (processes that vanish while reading are skipped).
pub fn read_all() -> Vec<ProcStatus> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_str().is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit())))
        .filter_map(|e| std::fs::read_to_string(e.path().join("status")).ok())
        .filter_map(|t| parse_status(&t))
        .collect()
}

/// `root`'s process tree and each member's status, read through /proc/<pid>/task/<tid>/children
/// (cost proportional to the tree, not to every process on the machine); `None` where the kernel
/// lacks that file (CONFIG_PROC_CHILDREN), so the caller falls back to a full scan.
pub fn read_tree(root: u32) -> Option<Vec<ProcStatus>> {
    let mut out = Vec::new();
    let mut stack = vec![root];
    let mut seen = HashSet::new();
    while let Some(pid) = stack.pop() {
        if !seen.insert(pid) {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/status")) else { continue };
        let Some(st) = parse_status(&text) else { continue };
        out.push(st);
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
        for t in tasks.flatten() {
            match std::fs::read_to_string(t.path().join("children")) {
                Ok(children) => stack.extend(children.split_whitespace().filter_map(|c| c.parse::<u32>().ok())),
                // The thread exited between listing and reading: nothing to follow.
                Err(_) if !t.path().exists() => {}
                // The kernel has no children files (CONFIG_PROC_CHILDREN off): the caller scans.
                Err(_) => return None,
            }
        }
    }
    Some(out)
}

/// The job rooted at `root`: its process tree through the children files, or a full scan.
pub fn job_tree(root: u32) -> Vec<ProcStatus> {
    read_tree(root).unwrap_or_else(|| {
        let all = read_all();
        let t = tree(root, &all);
        all.into_iter().filter(|p| t.contains(&p.pid)).collect()
    })
}

/// `root` and all its descendants.
pub fn tree(root: u32, table: &[ProcStatus]) -> HashSet<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for p in table {
        children.entry(p.ppid).or_default().push(p.pid);
    }
    let mut out = HashSet::from([root]);
    let mut stack = vec![root];
    while let Some(p) = stack.pop() {
        for c in children.get(&p).map(Vec::as_slice).unwrap_or(&[]) {
            if out.insert(*c) {
                stack.push(*c);
            }
        }
    }
    out
}

/// The command line of a process (NUL-separated in /proc), or its name.
pub fn cmdline(pid: u32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let s: Vec<String> = raw.split(|b| *b == 0).filter(|p| !p.is_empty()).map(|p| String::from_utf8_lossy(p).into_owned()).collect();
    (!s.is_empty()).then(|| s.join(" "))
}

/// The name of a process (`/proc/<pid>/comm`: the executable's name, at most 15 bytes), which
/// unlike the command line carries no arguments (paths, tokens).
pub fn name(pid: u32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/comm")).ok()?;
    let s = String::from_utf8_lossy(&raw).trim_end_matches('\n').to_string();
    (!s.is_empty()).then_some(s)
}

/// uid → user name from the text of /etc/passwd.
pub fn parse_passwd(text: &str) -> HashMap<u32, String> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            Some((f.get(2)?.parse().ok()?, (*f.first()?).to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    // /proc/<pid>/status texts in proc(5)'s format (written for the test, not recorded): a
    // process in a container as the host sees it (host PID 48213 is PID 57 inside), and a host
    // process. `reads_this_machine` below parses the real /proc.
    const CONTAINER: &str = "Name:\tpython3\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t48213\nNgid:\t0\nPid:\t48213\nPPid:\t48190\nTracerPid:\t0\nUid:\t1000\t1000\t1000\t1000\nGid:\t1000\t1000\t1000\t1000\nNSpid:\t48213\t57\nNSpgid:\t48213\t57\nVmRSS:\t 5242880 kB\nThreads:\t41\n";
    const HOST: &str = "Name:\tbash\nPid:\t1200\nPPid:\t1\nUid:\t0\t0\t0\t0\nNSpid:\t1200\nVmRSS:\t    4096 kB\n";

    #[test]
    fn status_and_nspid() {
        let c = parse_status(CONTAINER).unwrap();
        assert_eq!((c.pid, c.ppid, c.uid), (48213, 48190, 1000));
        assert_eq!(c.inner_pid(), Some(57));
        assert_eq!(c.rss, 5 << 30);
        let h = parse_status(HOST).unwrap();
        assert_eq!(h.inner_pid(), None);
        assert!(parse_status("garbage").is_none());
    }

    #[test]
    fn process_tree() {
        let t = |pid, ppid| ProcStatus { pid, ppid, ..Default::default() };
        let table = vec![t(1, 0), t(10, 1), t(11, 10), t(12, 11), t(13, 10), t(20, 1)];
        let tr = tree(10, &table);
        assert_eq!(tr, HashSet::from([10, 11, 12, 13]));
    }

    #[test]
    fn passwd() {
        let users = parse_passwd("root:x:0:0:root:/root:/bin/bash\n# comment\nalice:x:1000:1000::/home/alice:/bin/zsh\nbroken\n");
        assert_eq!(users[&0], "root");
        assert_eq!(users[&1000], "alice");
    }

    #[test]
    fn tree_walk_agrees_with_full_scan() {
        let me = std::process::id();
        let mut child = std::process::Command::new("sleep").arg("2").spawn().unwrap();
        let full = tree(me, &read_all());
        let walked: HashSet<u32> = read_tree(me).expect("children files").iter().map(|p| p.pid).collect();
        let _ = child.kill();
        let _ = child.wait();
        assert!(walked.contains(&child.id()));
        assert!(walked.is_subset(&full) || full.is_subset(&walked), "{walked:?} vs {full:?}");
    }

    #[test]
    fn reads_this_machine() {
        let all = read_all();
        let me = std::process::id();
        assert!(all.iter().any(|p| p.pid == me), "this test process is in /proc");
        assert!(tree(me, &all).contains(&me));
    }
}
