//! `vram watch`: every GPU and every process on it, live (ratatui), or once as a table / JSON.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::Result;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::widgets::{Block, Borders, Row, Sparkline, Table};
use serde_json::json;
use vram_core::units::gib;

use crate::measure::procs::{self, ProcStatus};
use crate::measure::{nvml, GpuReader, GpuReading};

/// A process row, joined from NVML and /proc.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcRow {
    /// NVML index.
    pub gpu: u32,
    /// Host PID.
    pub pid: u32,
    /// PID inside its container, when different.
    pub inner_pid: Option<u32>,
    /// User.
    pub user: String,
    /// GPU memory (None = N/A).
    pub used: Option<u64>,
    /// Peak since watch started.
    pub peak: Option<u64>,
    /// Command line.
    pub command: String,
}

/// Sort order of the process table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sort {
    /// Most GPU memory first.
    Memory,
    /// By GPU, then memory.
    Gpu,
    /// By PID.
    Pid,
}

/// Join NVML processes with /proc (users, command lines, container PIDs).
pub fn rows(
    gpus: &[GpuReading],
    table: &[ProcStatus],
    users: &HashMap<u32, String>,
    cmd: &dyn Fn(u32) -> Option<String>,
    peaks: &HashMap<(u32, u32), u64>,
    sort: Sort,
) -> Vec<ProcRow> {
    let mut out: Vec<ProcRow> = gpus
        .iter()
        .flat_map(|g| g.processes.iter().map(move |p| (g.index, p)))
        .map(|(gpu, p)| {
            let st = table.iter().find(|s| s.pid == p.pid);
            ProcRow {
                gpu,
                pid: p.pid,
                inner_pid: st.and_then(ProcStatus::inner_pid),
                user: st.and_then(|s| users.get(&s.uid).cloned()).or_else(|| st.map(|s| s.uid.to_string())).unwrap_or_else(|| "?".into()),
                used: p.used,
                peak: peaks.get(&(gpu, p.pid)).copied().or(p.used),
                command: cmd(p.pid).unwrap_or_else(|| "(not visible from here)".into()),
            }
        })
        .collect();
    match sort {
        Sort::Memory => out.sort_by(|a, b| b.used.cmp(&a.used).then(a.pid.cmp(&b.pid))),
        Sort::Gpu => out.sort_by(|a, b| a.gpu.cmp(&b.gpu).then(b.used.cmp(&a.used))),
        Sort::Pid => out.sort_by_key(|r| r.pid),
    }
    out
}

fn na(v: Option<u64>) -> String {
    v.map_or_else(|| "N/A".into(), |b| format!("{:.2}", gib(b)))
}

/// `--once` as text.
pub fn text(gpus: &[GpuReading], procs: &[ProcRow]) -> String {
    let mut o = String::new();
    o += &format!("{:>3}  {:<28} {:>18} {:>5} {:>5} {:>7}\n", "gpu", "name", "memory GiB", "util", "temp", "power");
    for g in gpus {
        o += &format!(
            "{:>3}  {:<28} {:>8.2} / {:<7.2} {:>4}% {:>4}C {:>6}W\n",
            g.index,
            g.name,
            gib(g.memory_used),
            gib(g.memory_total),
            g.utilization.map_or("-".into(), |u| u.to_string()),
            g.temperature.map_or("-".into(), |t| t.to_string()),
            g.power_mw.map_or("-".into(), |p| (p / 1000).to_string())
        );
    }
    o += &format!("\n{:>3} {:>8} {:>8} {:<10} {:>9} {:>9}  command\n", "gpu", "pid", "in-ctr", "user", "GiB", "peak");
    for p in procs {
        o += &format!(
            "{:>3} {:>8} {:>8} {:<10} {:>9} {:>9}  {}\n",
            p.gpu,
            p.pid,
            p.inner_pid.map_or("-".into(), |x| x.to_string()),
            p.user,
            na(p.used),
            na(p.peak),
            p.command
        );
    }
    o
}

/// `--once --json`.
pub fn json(gpus: &[GpuReading], procs: &[ProcRow]) -> serde_json::Value {
    json!({
        "gpus": gpus,
        "processes": procs.iter().map(|p| json!({"gpu": p.gpu, "pid": p.pid, "container_pid": p.inner_pid, "user": p.user, "gpu_memory_bytes": p.used, "peak_bytes": p.peak, "command": p.command})).collect::<Vec<_>>(),
    })
}

/// Run `vram watch`; `command_label`: export full command lines as metrics labels
/// (`--metrics-command-label`; by default only process names).
pub fn watch_with(once: bool, as_json: bool, interval: Duration, metrics: Option<String>, command_label: bool) -> Result<String> {
    let mut reader = nvml::open()?;
    let users = procs::parse_passwd(&std::fs::read_to_string("/etc/passwd").unwrap_or_default());
    let mut peaks: HashMap<(u32, u32), u64> = HashMap::new();
    let latest: crate::metrics::Latest = Default::default();
    if let Some(addr) = &metrics {
        let bound = crate::metrics::serve(addr, latest.clone())?;
        eprintln!("vram: Prometheus metrics on http://{bound}/metrics");
    }
    let mut read = |peaks: &mut HashMap<(u32, u32), u64>, sort: Sort| -> Result<(Vec<GpuReading>, Vec<ProcRow>)> {
        let gpus = reader.read()?;
        for g in &gpus {
            for p in &g.processes {
                if let Some(u) = p.used {
                    let e = peaks.entry((g.index, p.pid)).or_insert(0);
                    *e = (*e).max(u);
                }
            }
        }
        let table = procs::read_all();
        let rows = rows(&gpus, &table, &users, &|p| procs::cmdline(p), peaks, sort);
        if metrics.is_some() {
            *latest.lock().unwrap_or_else(|e| e.into_inner()) = crate::metrics::render(&gpus, command_label);
        }
        Ok((gpus, rows))
    };
    if once {
        let (gpus, rows) = read(&mut peaks, Sort::Memory)?;
        return Ok(if as_json { format!("{}\n", serde_json::to_string_pretty(&json(&gpus, &rows))?) } else { text(&gpus, &rows) });
    }
    let mut history: HashMap<u32, Vec<u64>> = HashMap::new();
    let mut sort = Sort::Memory;
    let mut terminal = ratatui::init();
    let result = (|| -> Result<()> {
        loop {
            let tick = Instant::now();
            let (gpus, rows) = read(&mut peaks, sort)?;
            for g in &gpus {
                let h = history.entry(g.index).or_default();
                h.push(g.memory_used >> 20);
                if h.len() > 240 {
                    h.remove(0);
                }
            }
            terminal.draw(|f| {
                let n = gpus.len() as u16;
                let [top, spark, bottom] =
                    Layout::vertical([Constraint::Length(n + 3), Constraint::Length(3 * n.max(1)), Constraint::Min(5)]).areas(f.area());
                let header = Row::new(["gpu", "name", "used GiB", "total GiB", "util", "temp", "power"])
                    .style(Style::default().add_modifier(Modifier::BOLD));
                let gpu_rows = gpus.iter().map(|g| {
                    Row::new(vec![
                        g.index.to_string(),
                        g.name.clone(),
                        format!("{:.2}", gib(g.memory_used)),
                        format!("{:.2}", gib(g.memory_total)),
                        g.utilization.map_or("-".into(), |u| format!("{u}%")),
                        g.temperature.map_or("-".into(), |t| format!("{t}C")),
                        g.power_mw.map_or("-".into(), |p| format!("{}W", p / 1000)),
                    ])
                });
                let widths = [
                    Constraint::Length(4),
                    Constraint::Length(28),
                    Constraint::Length(9),
                    Constraint::Length(10),
                    Constraint::Length(6),
                    Constraint::Length(6),
                    Constraint::Length(7),
                ];
                f.render_widget(
                    Table::new(gpu_rows, widths)
                        .header(header)
                        .block(Block::default().borders(Borders::ALL).title(" vram watch — q quits, s sorts ")),
                    top,
                );
                let parts = Layout::vertical(vec![Constraint::Length(3); gpus.len().max(1)]).split(spark);
                for (i, g) in gpus.iter().enumerate() {
                    let data = history.get(&g.index).cloned().unwrap_or_default();
                    let sp = Sparkline::default()
                        .data(&data)
                        .max(g.memory_total >> 20)
                        .block(Block::default().borders(Borders::ALL).title(format!(" GPU {} memory history ", g.index)));
                    f.render_widget(sp, parts[i]);
                }
                let prow = rows.iter().map(|p| {
                    Row::new(vec![
                        p.gpu.to_string(),
                        p.pid.to_string(),
                        p.inner_pid.map_or("-".into(), |x| x.to_string()),
                        p.user.clone(),
                        na(p.used),
                        na(p.peak),
                        p.command.clone(),
                    ])
                });
                let pw = [
                    Constraint::Length(4),
                    Constraint::Length(8),
                    Constraint::Length(8),
                    Constraint::Length(10),
                    Constraint::Length(9),
                    Constraint::Length(9),
                    Constraint::Min(20),
                ];
                let ph = Row::new(["gpu", "pid", "in-ctr", "user", "GiB", "peak", "command"])
                    .style(Style::default().add_modifier(Modifier::BOLD));
                f.render_widget(
                    Table::new(prow, pw)
                        .header(ph)
                        .block(Block::default().borders(Borders::ALL).title(format!(" processes, sorted by {sort:?} "))),
                    bottom,
                );
            })?;
            let wait = interval.saturating_sub(tick.elapsed());
            if event::poll(wait)? {
                if let Event::Key(k) = event::read()? {
                    if k.kind == KeyEventKind::Press {
                        match k.code {
                            KeyCode::Char('q') | KeyCode::Esc => return Ok(()),
                            KeyCode::Char('s') => {
                                sort = match sort {
                                    Sort::Memory => Sort::Gpu,
                                    Sort::Gpu => Sort::Pid,
                                    Sort::Pid => Sort::Memory,
                                }
                            }
                            _ => {}
                        }
                    }
                }
            }
        }
    })();
    ratatui::restore();
    result.map(|_| String::new())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::{ProcKind, ProcReading};

    fn gpu() -> GpuReading {
        GpuReading {
            index: 0,
            name: "NVIDIA H100 80GB HBM3".into(),
            uuid: "GPU-x".into(),
            memory_total: 80 << 30,
            memory_used: 30 << 30,
            utilization: Some(97),
            temperature: Some(61),
            power_mw: Some(650_000),
            processes: vec![
                ProcReading { pid: 48213, used: Some(29 << 30), kind: ProcKind::Compute },
                ProcReading { pid: 900, used: None, kind: ProcKind::Graphics },
            ],
        }
    }

    #[test]
    fn joins_and_shows_na() {
        let table = vec![ProcStatus { pid: 48213, ppid: 1, uid: 1000, nspid: vec![48213, 57], name: "python3".into(), rss: 0 }];
        let users = HashMap::from([(1000, "alice".to_string())]);
        let peaks = HashMap::from([((0, 48213), 31u64 << 30)]);
        let r = rows(&[gpu()], &table, &users, &|p| (p == 48213).then(|| "python3 train.py".into()), &peaks, Sort::Memory);
        assert_eq!(r[0].pid, 48213);
        assert_eq!(r[0].inner_pid, Some(57));
        assert_eq!(r[0].user, "alice");
        assert_eq!(r[0].peak, Some(31 << 30));
        assert_eq!(r[1].used, None);
        let t = text(&[gpu()], &r);
        assert!(t.contains("N/A"), "{t}");
        assert!(t.contains("python3 train.py"));
        let j = json(&[gpu()], &r);
        assert_eq!(j["processes"][1]["gpu_memory_bytes"], serde_json::Value::Null);
        assert_eq!(j["processes"][0]["container_pid"], 57);
    }
}
