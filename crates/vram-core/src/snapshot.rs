//! PyTorch memory snapshots (`torch.cuda.memory._snapshot()` / `_dump_snapshot()`): the model of
//! what they hold, and the accounting PyTorch's own viewer does on them.
//!
//! The layout is the dict built by `_snapshot` in torch/cuda/memory.py from
//! c10/cuda/CUDACachingAllocator.h (`SegmentInfo`, `BlockInfo`, `TraceEntry`): `segments` (the
//! allocator's cudaMalloc'd segments at dump time, each with its blocks in address order) and
//! `device_traces` (one list per device of alloc / free_requested / free_completed /
//! segment_alloc / segment_free / ... events, each with its stack frames).
//!
//! Peaks are computed exactly as `process_alloc_data` in torch/utils/viz/MemoryViz.js (the code
//! behind `torch.cuda._memory_viz.trace_plot` and pytorch.org/memory_viz); the committed script
//! validation/snapshots/memory_viz_peaks.py mirrors it in Python and the tests hold the two equal.

use std::collections::HashMap;

use serde::Serialize;
use thiserror::Error;

use crate::pickle::{self, Pickle, PickleError, Value};

/// Why a snapshot could not be read.
#[derive(Debug, Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum SnapshotError {
    /// The pickle itself was refused.
    #[error(transparent)]
    Pickle(#[from] PickleError),
    /// The pickle is plain data but not a memory snapshot.
    #[error("not a PyTorch memory snapshot: {0} (expected the dict written by torch.cuda.memory._dump_snapshot())")]
    Shape(String),
}

/// One stack frame as the snapshot records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Frame {
    /// Function name.
    pub name: String,
    /// Source file.
    pub filename: String,
    /// Line number.
    pub line: i64,
}

/// Index into [`Snapshot::stacks`].
pub type StackId = u32;

/// State of a block at dump time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockState {
    /// Held by a live tensor.
    ActiveAllocated,
    /// Freed by the program but waiting on a stream event.
    ActivePending,
    /// Cached, free for reuse.
    Inactive,
}

/// One block of a segment.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Block {
    /// Device address (segment address + sizes of the blocks before it).
    pub address: u64,
    /// Bytes the block occupies (rounded).
    pub size: u64,
    /// Bytes the program asked for.
    pub requested_size: u64,
    /// Allocation state.
    pub state: BlockState,
    /// Where it was allocated.
    pub stack: StackId,
}

/// One cudaMalloc'd segment at dump time.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Segment {
    /// CUDA device index.
    pub device: i64,
    /// Base address.
    pub address: u64,
    /// Bytes reserved.
    pub total_size: u64,
    /// CUDA stream.
    pub stream: i64,
    /// Small (<= 1 MiB requests) or large pool.
    pub small: bool,
    /// Blocks in address order.
    pub blocks: Vec<Block>,
}

impl Segment {
    /// Bytes of `active_allocated` blocks (rounded sizes).
    pub fn active(&self) -> u64 {
        self.blocks.iter().filter(|b| b.state == BlockState::ActiveAllocated).map(|b| b.size).sum()
    }
}

/// What a trace entry records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// A tensor allocation.
    Alloc,
    /// The program dropped a tensor.
    FreeRequested,
    /// The block went back to the cache.
    FreeCompleted,
    /// Legacy single free event.
    Free,
    /// cudaMalloc of a new segment.
    SegmentAlloc,
    /// cudaFree of a segment.
    SegmentFree,
    /// Expandable segment grew.
    SegmentMap,
    /// Expandable segment shrank.
    SegmentUnmap,
    /// An out-of-memory error.
    Oom,
    /// Anything else (snapshot markers, user annotations).
    Other,
}

/// One entry of a device trace.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TraceEvent {
    /// What happened.
    pub action: Action,
    /// Address concerned.
    pub addr: u64,
    /// Bytes (requested size for alloc/free; segment size for segment events).
    pub size: u64,
    /// CUDA stream.
    pub stream: i64,
    /// Microseconds since the epoch, when recorded.
    pub time_us: Option<i64>,
    /// Where it happened.
    pub stack: StackId,
}

/// A parsed snapshot.
#[derive(Debug, Clone, Serialize)]
pub struct Snapshot {
    /// Segments at dump time.
    pub segments: Vec<Segment>,
    /// One event list per device.
    pub traces: Vec<Vec<TraceEvent>>,
    /// Distinct stacks, innermost frame first.
    pub stacks: Vec<Vec<Frame>>,
    /// `PYTORCH_CUDA_ALLOC_CONF` recorded in the snapshot, when present.
    pub alloc_conf: Option<String>,
    /// Whether the snapshot says expandable segments were on.
    pub expandable_segments: bool,
}

/// Read a snapshot pickle.
pub fn parse(data: &[u8]) -> Result<Snapshot, SnapshotError> {
    let p = pickle::load(data)?;
    Reader { p: &p, stacks: Vec::new(), by_list: HashMap::new(), frames: HashMap::new() }.snapshot()
}

struct Reader<'a> {
    p: &'a Pickle,
    stacks: Vec<Vec<Frame>>,
    by_list: HashMap<Option<u32>, StackId>,
    frames: HashMap<u32, Frame>,
}

fn shape(msg: impl Into<String>) -> SnapshotError {
    SnapshotError::Shape(msg.into())
}

impl<'a> Reader<'a> {
    fn int(&self, d: Value, key: &str, what: &str) -> Result<i64, SnapshotError> {
        match self.p.get(d, key) {
            Some(Value::Int(i)) => Ok(i),
            Some(Value::Bool(b)) => Ok(b as i64),
            _ => Err(shape(format!("{what} has no integer `{key}`"))),
        }
    }
    fn uint(&self, d: Value, key: &str, what: &str) -> Result<u64, SnapshotError> {
        let v = self.int(d, key, what)?;
        u64::try_from(v).map_err(|_| shape(format!("{what} has a negative `{key}` ({v})")))
    }
    fn string(&self, d: Value, key: &str) -> Option<&'a str> {
        let p: &'a Pickle = self.p;
        p.get(d, key).and_then(|v| p.str(v))
    }
    fn list(&self, d: Value, key: &str, what: &str) -> Result<&'a [Value], SnapshotError> {
        let p: &'a Pickle = self.p;
        p.get(d, key).and_then(|v| p.seq(v)).ok_or_else(|| shape(format!("{what} has no list `{key}`")))
    }

    fn snapshot(mut self) -> Result<Snapshot, SnapshotError> {
        let root = self.p.root;
        if self.p.items(root).is_none() {
            return Err(shape("the pickle is not a dict"));
        }
        let segments = self.list(root, "segments", "the snapshot")?.iter().map(|s| self.segment(*s)).collect::<Result<Vec<_>, _>>()?;
        let mut traces = Vec::new();
        let p: &'a Pickle = self.p;
        if let Some(devs) = p.get(root, "device_traces").and_then(|v| p.seq(v)) {
            for dev in devs {
                let evs = p.seq(*dev).ok_or_else(|| shape("a device trace is not a list"))?;
                traces.push(evs.iter().map(|e| self.event(*e)).collect::<Result<Vec<_>, _>>()?);
            }
        }
        let settings = self.p.get(root, "allocator_settings");
        let alloc_conf = settings.and_then(|s| self.string(s, "PYTORCH_CUDA_ALLOC_CONF")).map(str::to_owned);
        let expandable_segments = settings.and_then(|s| self.p.get(s, "expandable_segments")) == Some(Value::Bool(true));
        Ok(Snapshot { segments, traces, stacks: self.stacks, alloc_conf, expandable_segments })
    }

    fn segment(&mut self, s: Value) -> Result<Segment, SnapshotError> {
        let address = self.uint(s, "address", "a segment")?;
        let mut addr = address;
        let mut blocks = Vec::new();
        for &b in self.list(s, "blocks", "a segment")? {
            let size = self.uint(b, "size", "a block")?;
            // Legacy snapshots lack requested_size: MemoryViz.js annotate_snapshot falls back to size.
            let requested_size = self.uint(b, "requested_size", "a block").unwrap_or(size);
            let state = match self.string(b, "state") {
                Some("active_allocated") => BlockState::ActiveAllocated,
                Some("active_pending_free") => BlockState::ActivePending,
                Some("inactive") => BlockState::Inactive,
                other => return Err(shape(format!("a block has state {other:?}"))),
            };
            let stack = self.stack(self.p.get(b, "frames"))?;
            blocks.push(Block { address: addr, size, requested_size, state, stack });
            addr = addr.checked_add(size).ok_or_else(|| shape("block addresses overflow"))?;
        }
        Ok(Segment {
            device: self.int(s, "device", "a segment")?,
            address,
            total_size: self.uint(s, "total_size", "a segment")?,
            stream: self.int(s, "stream", "a segment").unwrap_or(0),
            small: self.string(s, "segment_type") == Some("small"),
            blocks,
        })
    }

    fn event(&mut self, e: Value) -> Result<TraceEvent, SnapshotError> {
        let action = match self.string(e, "action") {
            Some("alloc") => Action::Alloc,
            Some("free_requested") => Action::FreeRequested,
            Some("free_completed") => Action::FreeCompleted,
            Some("free") => Action::Free,
            Some("segment_alloc") => Action::SegmentAlloc,
            Some("segment_free") => Action::SegmentFree,
            Some("segment_map") => Action::SegmentMap,
            Some("segment_unmap") => Action::SegmentUnmap,
            Some("oom") => Action::Oom,
            Some(_) => Action::Other,
            None => return Err(shape("a trace entry has no `action`")),
        };
        let addr = if action == Action::Oom { 0 } else { self.uint(e, "addr", "a trace entry")? };
        let time_us = self.int(e, "time_us", "").ok();
        Ok(TraceEvent {
            action,
            addr,
            size: self.uint(e, "size", "a trace entry")?,
            stream: self.int(e, "stream", "").unwrap_or(0),
            time_us,
            stack: self.stack(self.p.get(e, "frames"))?,
        })
    }

    /// Intern a frames list (pickled once and shared through the memo, so keyed by its id).
    fn stack(&mut self, frames: Option<Value>) -> Result<StackId, SnapshotError> {
        let key = match frames {
            Some(Value::List(i) | Value::Tuple(i)) => Some(i),
            _ => None,
        };
        if let Some(id) = self.by_list.get(&key) {
            return Ok(*id);
        }
        let mut out = Vec::new();
        let p: &'a Pickle = self.p;
        for f in frames.and_then(|v| p.seq(v)).unwrap_or(&[]) {
            let fkey = if let Value::Dict(i) = f { Some(*i) } else { None };
            if let Some(fr) = fkey.and_then(|k| self.frames.get(&k)) {
                out.push(fr.clone());
                continue;
            }
            let fr = Frame {
                name: self.string(*f, "name").unwrap_or("?").to_owned(),
                filename: self.string(*f, "filename").unwrap_or("?").to_owned(),
                line: self.int(*f, "line", "a frame").unwrap_or(0),
            };
            if let Some(k) = fkey {
                self.frames.insert(k, fr.clone());
            }
            out.push(fr);
        }
        let id = StackId::try_from(self.stacks.len()).map_err(|_| shape("too many stacks"))?;
        self.stacks.push(out);
        self.by_list.insert(key, id);
        Ok(id)
    }
}

/// A live allocation in memory_viz's accounting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Live {
    /// Address.
    pub addr: u64,
    /// Bytes as memory_viz counts them (requested size).
    pub size: u64,
    /// Where it was allocated (or freed, when the alloc predates the trace).
    pub stack: StackId,
    /// Index of the trace event that allocated it; `None` when live before the trace began.
    pub event: Option<usize>,
}

/// A memory_viz timeline of one device: totals after each action.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Timeline {
    /// Bytes live before the first action (allocated before the trace began).
    pub initial: u64,
    /// (trace event index, total bytes after it) for every action.
    pub points: Vec<(usize, u64)>,
    /// Largest total after any action (memory_viz `max_size`).
    pub peak: u64,
    /// Trace index of the first action reaching the peak (`None`: no actions).
    pub peak_event: Option<usize>,
}

/// Which memory_viz view: allocations (Active Memory Timeline) or segments (Active Cached Memory).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    /// Tensor allocations: alloc / free_completed, block requested sizes.
    Allocated,
    /// Segments: segment_alloc / segment_free, segment total sizes.
    Reserved,
}

impl Snapshot {
    fn is_alloc(view: View, a: Action) -> bool {
        matches!((view, a), (View::Allocated, Action::Alloc) | (View::Reserved, Action::SegmentAlloc))
    }
    fn is_free(view: View, a: Action) -> bool {
        matches!((view, a), (View::Allocated, Action::Free | Action::FreeCompleted) | (View::Reserved, Action::SegmentFree))
    }

    /// Items live before the trace began: frees with no alloc in the trace, then what is
    /// live at dump time and never allocated in the trace (MemoryViz.js `initially_allocated`).
    /// Returns them with the set of trace indices whose free removes a pre-trace item.
    fn initial(&self, device: usize, view: View) -> (Vec<Live>, Vec<bool>) {
        let trace = self.traces.get(device).map(Vec::as_slice).unwrap_or(&[]);
        let mut open: HashMap<u64, usize> = HashMap::new();
        let mut pre = Vec::new();
        let mut removes_pre = vec![false; trace.len()];
        for (i, e) in trace.iter().enumerate() {
            if Self::is_alloc(view, e.action) {
                open.insert(e.addr, i);
            } else if Self::is_free(view, e.action) && open.remove(&e.addr).is_none() {
                pre.push(Live { addr: e.addr, size: e.size, stack: e.stack, event: None });
                removes_pre[i] = true;
            }
        }
        for seg in self.segments.iter().filter(|s| s.device == device as i64) {
            match view {
                View::Reserved if !open.contains_key(&seg.address) => {
                    pre.push(Live { addr: seg.address, size: seg.total_size, stack: 0, event: None })
                }
                View::Reserved => {}
                View::Allocated => {
                    for b in seg.blocks.iter().filter(|b| b.state == BlockState::ActiveAllocated && !open.contains_key(&b.address)) {
                        pre.push(Live { addr: b.address, size: b.requested_size, stack: b.stack, event: None });
                    }
                }
            }
        }
        (pre, removes_pre)
    }

    /// The memory_viz timeline of `device` (MemoryViz.js `process_alloc_data`, all entries drawn).
    pub fn timeline(&self, device: usize, view: View) -> Timeline {
        let trace = self.traces.get(device).map(Vec::as_slice).unwrap_or(&[]);
        let (pre, removes_pre) = self.initial(device, view);
        let initial: u64 = pre.iter().map(|l| l.size).sum();
        let mut open: HashMap<u64, u64> = HashMap::new();
        let (mut total, mut peak, mut peak_event, mut points) = (initial, 0u64, None, Vec::new());
        for (i, e) in trace.iter().enumerate() {
            if Self::is_alloc(view, e.action) {
                open.insert(e.addr, e.size);
                total = total.saturating_add(e.size);
            } else if Self::is_free(view, e.action) {
                let size = if removes_pre[i] { e.size } else { open.remove(&e.addr).unwrap_or(0) };
                total = total.saturating_sub(size);
            } else {
                continue;
            }
            points.push((i, total));
            if total > peak || peak_event.is_none() {
                peak = total;
                peak_event = Some(i);
            }
        }
        if points.is_empty() {
            // MemoryViz.js: with no actions it draws every pre-trace allocation as one step.
            peak = initial;
        }
        Timeline { initial, points, peak, peak_event }
    }

    /// Allocations live right after trace event `at` (memory_viz accounting), largest first.
    pub fn live_at(&self, device: usize, at: Option<usize>) -> Vec<Live> {
        let trace = self.traces.get(device).map(Vec::as_slice).unwrap_or(&[]);
        let (pre, removes_pre) = self.initial(device, View::Allocated);
        let end = at.map_or(0, |a| a.saturating_add(1)).min(trace.len());
        let mut live: HashMap<u64, Live> = HashMap::new();
        // Pre-trace items freed inside the trace are live until that free.
        let freed_pre: std::collections::HashSet<u64> =
            trace[..end].iter().enumerate().filter(|(i, _)| removes_pre[*i]).map(|(_, e)| e.addr).collect();
        for l in pre.iter().filter(|l| !freed_pre.contains(&l.addr)) {
            live.insert(l.addr, *l);
        }
        for (i, e) in trace[..end].iter().enumerate() {
            if e.action == Action::Alloc {
                live.insert(e.addr, Live { addr: e.addr, size: e.size, stack: e.stack, event: Some(i) });
            } else if Self::is_free(View::Allocated, e.action) && !removes_pre[i] {
                live.remove(&e.addr);
            }
        }
        let mut v: Vec<Live> = live.into_values().collect();
        v.sort_by(|a, b| b.size.cmp(&a.size).then(a.addr.cmp(&b.addr)));
        v
    }

    /// Devices with a non-empty trace or a segment.
    pub fn devices(&self) -> Vec<usize> {
        let mut d: Vec<usize> = self.traces.iter().enumerate().filter(|(_, t)| !t.is_empty()).map(|(i, _)| i).collect();
        for s in &self.segments {
            if let Ok(i) = usize::try_from(s.device) {
                if !d.contains(&i) {
                    d.push(i);
                }
            }
        }
        d.sort_unstable();
        d
    }
}
