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

use std::borrow::Borrow;
use std::collections::hash_map::RandomState;
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, Hasher};

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

/// Index into [`Snapshot::frames`].
pub type FrameId = u32;

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
    /// Distinct stacks, innermost frame first, as indices into `frames`.
    pub stacks: Vec<Vec<FrameId>>,
    /// Distinct frames (each pickled frame dict read once).
    pub frames: Vec<Frame>,
    /// `PYTORCH_CUDA_ALLOC_CONF` recorded in the snapshot, when present.
    pub alloc_conf: Option<String>,
    /// Whether the snapshot says expandable segments were on.
    pub expandable_segments: bool,
}

/// Read a snapshot pickle.
pub fn parse(data: &[u8]) -> Result<Snapshot, SnapshotError> {
    let p = pickle::load(data)?;
    let r = Reader {
        p: &p,
        stacks: Vec::new(),
        frames: Vec::new(),
        by_list: Vec::new(),
        no_list: None,
        by_dict: Vec::new(),
        event_at: Vec::new(),
        frame_at: Vec::new(),
    };
    r.snapshot()
}

/// Marks an arena id not interned yet.
const NONE: u32 = u32::MAX;

struct Reader<'a> {
    p: &'a Pickle<'a>,
    stacks: Vec<Vec<FrameId>>,
    frames: Vec<Frame>,
    /// Stack of each frames list, by its arena id (lists are shared through the memo).
    by_list: Vec<StackId>,
    /// Stack of entries with no frames list.
    no_list: Option<StackId>,
    /// Frame of each frame dict, by its arena id.
    by_dict: Vec<FrameId>,
    /// Where the trace-entry fields sit in each record shape, worked out once per shape.
    event_at: Vec<Option<[Option<u8>; 6]>>,
    /// The same for frame fields.
    frame_at: Vec<Option<[Option<u8>; 3]>>,
}

fn shape(msg: impl Into<String>) -> SnapshotError {
    SnapshotError::Shape(msg.into())
}

/// `d[key]` as an integer (bools count, as in Python).
fn int(v: Option<Value>, key: &str, what: &str) -> Result<i64, SnapshotError> {
    match v {
        Some(Value::Int(i)) => Ok(i),
        Some(Value::Bool(b)) => Ok(b as i64),
        _ => Err(shape(format!("{what} has no integer `{key}`"))),
    }
}

/// `d[key]` as a non-negative integer.
fn uint(v: Option<Value>, key: &str, what: &str) -> Result<u64, SnapshotError> {
    let v = int(v, key, what)?;
    u64::try_from(v).map_err(|_| shape(format!("{what} has a negative `{key}` ({v})")))
}

/// Memo-style table lookup: the entry for arena id `i`, growing the table as needed.
fn slot(table: &mut Vec<u32>, i: u32) -> &mut u32 {
    let i = i as usize;
    if i >= table.len() {
        table.resize(i + 1, NONE);
    }
    &mut table[i]
}

impl<'a> Reader<'a> {
    /// The values of `keys` in dict `d`, read in one pass over its items (the last assignment
    /// wins, as in Python); all `None` when `d` is not a dict.
    fn fields<const N: usize>(&self, d: Value, keys: [&str; N]) -> [Option<Value>; N] {
        let mut out = [None; N];
        for (k, v) in self.p.items(d).into_iter().flatten() {
            if let Some(j) = self.p.str(k).and_then(|k| keys.iter().position(|x| *x == k)) {
                out[j] = Some(v);
            }
        }
        out
    }
    /// [`Reader::fields`] for the hot dicts (trace entries, frames): a record's values are
    /// picked by positions computed once per shape, with no string comparison.
    fn fields_at<const N: usize>(&self, d: Value, keys: [&str; N], at: &mut Vec<Option<[Option<u8>; N]>>) -> [Option<Value>; N] {
        let Some(rec) = self.p.record(d).filter(|r| r.len() <= usize::from(u8::MAX)) else {
            return self.fields(d, keys);
        };
        let (shape, s) = (rec.shape, rec.shape as usize);
        if s >= at.len() {
            at.resize(s + 1, None);
        }
        let pos = *at[s].get_or_insert_with(|| {
            let mut pos = [None; N];
            for (i, k) in self.p.shape_keys(shape).iter().enumerate() {
                // The last occurrence wins, as in Python; shapes hold at most a few keys.
                if let Some(j) = self.p.str(*k).and_then(|k| keys.iter().position(|x| *x == k)) {
                    pos[j] = u8::try_from(i).ok();
                }
            }
            pos
        });
        let mut out = [None; N];
        for (o, p) in out.iter_mut().zip(pos) {
            *o = p.and_then(|i| rec.get(i as usize));
        }
        out
    }
    fn str(&self, v: Option<Value>) -> Option<&'a str> {
        let p: &'a Pickle<'a> = self.p;
        v.and_then(|v| p.str(v))
    }
    fn list(&self, v: Option<Value>, key: &str, what: &str) -> Result<&'a [Value], SnapshotError> {
        let p: &'a Pickle<'a> = self.p;
        v.and_then(|v| p.seq(v)).ok_or_else(|| shape(format!("{what} has no list `{key}`")))
    }

    fn snapshot(mut self) -> Result<Snapshot, SnapshotError> {
        let root = self.p.root;
        if self.p.items(root).is_none() {
            return Err(shape("the pickle is not a dict"));
        }
        let [segs, devs, settings] = self.fields(root, ["segments", "device_traces", "allocator_settings"]);
        let segments = self.list(segs, "segments", "the snapshot")?.iter().map(|s| self.segment(*s)).collect::<Result<Vec<_>, _>>()?;
        let mut traces = Vec::new();
        let p: &'a Pickle<'a> = self.p;
        if let Some(devs) = devs.and_then(|v| p.seq(v)) {
            for dev in devs {
                let evs = p.seq(*dev).ok_or_else(|| shape("a device trace is not a list"))?;
                let mut out = Vec::with_capacity(evs.len());
                for e in evs {
                    out.push(self.event(*e)?);
                }
                traces.push(out);
            }
        }
        let [conf, expandable] = settings.map_or([None, None], |s| self.fields(s, ["PYTORCH_CUDA_ALLOC_CONF", "expandable_segments"]));
        let alloc_conf = self.str(conf).map(str::to_owned);
        let expandable_segments = expandable == Some(Value::Bool(true));
        Ok(Snapshot { segments, traces, stacks: self.stacks, frames: self.frames, alloc_conf, expandable_segments })
    }

    fn segment(&mut self, s: Value) -> Result<Segment, SnapshotError> {
        let [address, blocks, device, total_size, stream, segment_type] =
            self.fields(s, ["address", "blocks", "device", "total_size", "stream", "segment_type"]);
        let address = uint(address, "address", "a segment")?;
        let mut addr = address;
        let mut out = Vec::new();
        for &b in self.list(blocks, "blocks", "a segment")? {
            let [size, requested_size, state, frames] = self.fields(b, ["size", "requested_size", "state", "frames"]);
            let size = uint(size, "size", "a block")?;
            // Legacy snapshots lack requested_size: MemoryViz.js annotate_snapshot falls back to size.
            let requested_size = uint(requested_size, "requested_size", "a block").unwrap_or(size);
            let state = match self.str(state) {
                Some("active_allocated") => BlockState::ActiveAllocated,
                Some("active_pending_free") => BlockState::ActivePending,
                Some("inactive") => BlockState::Inactive,
                other => return Err(shape(format!("a block has state {other:?}"))),
            };
            let stack = self.stack(frames)?;
            out.push(Block { address: addr, size, requested_size, state, stack });
            addr = addr.checked_add(size).ok_or_else(|| shape("block addresses overflow"))?;
        }
        Ok(Segment {
            device: int(device, "device", "a segment")?,
            address,
            total_size: uint(total_size, "total_size", "a segment")?,
            stream: int(stream, "stream", "a segment").unwrap_or(0),
            small: self.str(segment_type) == Some("small"),
            blocks: out,
        })
    }

    fn event(&mut self, e: Value) -> Result<TraceEvent, SnapshotError> {
        let mut at = std::mem::take(&mut self.event_at);
        let [action, addr, size, stream, time_us, frames] =
            self.fields_at(e, ["action", "addr", "size", "stream", "time_us", "frames"], &mut at);
        self.event_at = at;
        let action = match self.str(action) {
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
        let addr = if action == Action::Oom { 0 } else { uint(addr, "addr", "a trace entry")? };
        Ok(TraceEvent {
            action,
            addr,
            size: uint(size, "size", "a trace entry")?,
            stream: int(stream, "stream", "").unwrap_or(0),
            time_us: int(time_us, "time_us", "").ok(),
            stack: self.stack(frames)?,
        })
    }

    /// Intern a frames list (pickled once and shared through the memo, so keyed by its id).
    fn stack(&mut self, frames: Option<Value>) -> Result<StackId, SnapshotError> {
        let key = match frames {
            Some(Value::List(i) | Value::Tuple(i)) => Some(i),
            _ => None,
        };
        let known = match key {
            Some(i) => *slot(&mut self.by_list, i),
            None => self.no_list.unwrap_or(NONE),
        };
        if known != NONE {
            return Ok(known);
        }
        let p: &'a Pickle<'a> = self.p;
        let items = frames.and_then(|v| p.seq(v)).unwrap_or(&[]);
        let mut out = Vec::with_capacity(items.len());
        for f in items {
            out.push(self.frame(*f)?);
        }
        let id = StackId::try_from(self.stacks.len()).ok().filter(|&i| i != NONE).ok_or_else(|| shape("too many stacks"))?;
        self.stacks.push(out);
        match key {
            Some(i) => *slot(&mut self.by_list, i) = id,
            None => self.no_list = Some(id),
        }
        Ok(id)
    }

    /// Intern a frame dict (shared through the memo too, so keyed by its id).
    fn frame(&mut self, f: Value) -> Result<FrameId, SnapshotError> {
        let key = if let Value::Dict(i) = f { Some(i) } else { None };
        if let Some(k) = key {
            let known = *slot(&mut self.by_dict, k);
            if known != NONE {
                return Ok(known);
            }
        }
        let mut at = std::mem::take(&mut self.frame_at);
        let [name, filename, line] = self.fields_at(f, ["name", "filename", "line"], &mut at);
        self.frame_at = at;
        let fr = Frame {
            name: self.str(name).unwrap_or("?").to_owned(),
            filename: self.str(filename).unwrap_or("?").to_owned(),
            line: int(line, "line", "a frame").unwrap_or(0),
        };
        let id = FrameId::try_from(self.frames.len()).ok().filter(|&i| i != NONE).ok_or_else(|| shape("too many frames"))?;
        self.frames.push(fr);
        if let Some(k) = key {
            *slot(&mut self.by_dict, k) = id;
        }
        Ok(id)
    }
}

/// Hash state for device addresses on the hot paths: one folded 128-bit multiply per key (the
/// mixing foldhash uses) with a per-process seed drawn from std's `RandomState`, instead of
/// SipHash, which cost about a tenth of `vram explain`'s time on a 1.3 M-entry trace (perf).
#[derive(Clone, Copy)]
struct AddrState(u64);

impl Default for AddrState {
    fn default() -> Self {
        AddrState(RandomState::new().hash_one(0x5eed_u64))
    }
}

impl BuildHasher for AddrState {
    type Hasher = AddrHasher;
    fn build_hasher(&self) -> AddrHasher {
        AddrHasher(self.0)
    }
}

struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u64(&mut self, x: u64) {
        let p = u128::from(x ^ self.0) * 0x9e37_79b9_7f4a_7c15_u128;
        self.0 = (p as u64) ^ ((p >> 64) as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

type AddrMap<V> = HashMap<u64, V, AddrState>;
type AddrSet = HashSet<u64, AddrState>;

/// What was live before a device's trace began, in one view (see [`Snapshot::initial`]).
struct Initial {
    pre: Vec<Live>,
    removes_pre: Vec<bool>,
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
    fn initial(&self, device: usize, view: View) -> Initial {
        let trace = self.traces.get(device).map(Vec::as_slice).unwrap_or(&[]);
        let mut open: AddrMap<usize> = AddrMap::default();
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
        Initial { pre, removes_pre }
    }

    /// The memory_viz timeline of `device` (MemoryViz.js `process_alloc_data`, all entries drawn).
    pub fn timeline(&self, device: usize, view: View) -> Timeline {
        self.timeline_from(device, view, &self.initial(device, view))
    }

    fn timeline_from(&self, device: usize, view: View, init: &Initial) -> Timeline {
        let trace = self.traces.get(device).map(Vec::as_slice).unwrap_or(&[]);
        let removes_pre = &init.removes_pre;
        let initial: u64 = init.pre.iter().map(|l| l.size).sum();
        let mut open: AddrMap<u64> = AddrMap::default();
        let (mut total, mut peak, mut peak_event) = (initial, 0u64, None);
        let mut points = Vec::with_capacity(trace.len());
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
        self.live_from(device, at, &self.initial(device, View::Allocated))
    }

    fn live_from(&self, device: usize, at: Option<usize>, init: &Initial) -> Vec<Live> {
        let trace = self.traces.get(device).map(Vec::as_slice).unwrap_or(&[]);
        let (pre, removes_pre) = (&init.pre, &init.removes_pre);
        let end = at.map_or(0, |a| a.saturating_add(1)).min(trace.len());
        let mut live: AddrMap<Live> = AddrMap::default();
        // Pre-trace items freed inside the trace are live until that free.
        let freed_pre: AddrSet = trace[..end].iter().enumerate().filter(|(i, _)| removes_pre[*i]).map(|(_, e)| e.addr).collect();
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

/// What a live allocation is, inferred from the Python frames that allocated it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    /// Model weights (module construction, `.to()`, `.cuda()`, loading).
    Parameters,
    /// Weight gradients (`AccumulateGrad` in backward, or still live when the trace ends).
    Gradients,
    /// Allocated inside `optimizer.step`.
    OptimizerState,
    /// Allocated inside a module's `forward`.
    Activations,
    /// Allocated in backward and freed again (activation gradients, workspaces).
    Temporaries,
    /// Live before recording started, with no frames to tell.
    Unknown,
    /// Allocated while recording, but with no frames: a C++ thread with no Python stack under
    /// `stacks="python"` (autograd's backward worker: seen in the H100 recordings).
    NoFrames,
    /// Frames that match none of the above.
    Other,
}

impl Category {
    /// Human-readable name.
    pub fn describe(self) -> &'static str {
        match self {
            Category::Parameters => "parameters",
            Category::Gradients => "gradients",
            Category::OptimizerState => "optimizer state",
            Category::Activations => "activations",
            Category::Temporaries => "temporaries",
            Category::Unknown => "unknown (allocated before recording started)",
            Category::NoFrames => "unknown (no frames: a C++ thread, e.g. autograd's backward, under stacks=\"python\")",
            Category::Other => "other",
        }
    }
}

fn is_python(f: &Frame) -> bool {
    f.filename.ends_with(".py")
}

/// Infer the category from a stack (innermost first). A guess by frame names, reported as such.
pub fn categorize<F: Borrow<Frame>>(stack: &[F], freed_in_trace: bool) -> Category {
    if stack.is_empty() {
        return Category::Unknown;
    }
    let any = |p: &dyn Fn(&Frame) -> bool| stack.iter().any(|f| p(f.borrow()));
    if any(&|f| (f.name == "step" || f.name.contains("_step") || f.name == "wrapper") && f.filename.contains("optim")) {
        return Category::OptimizerState;
    }
    // Backward runs in the autograd engine: `backward` / `_engine_run_backward` frames, or only
    // the engine's C++ frames on its worker thread. (`autograd/function.py` alone is a custom
    // Function's *forward*, e.g. bitsandbytes' matmul, so the file name is not used.)
    if any(&|f| f.name.contains("backward") || f.name.contains("autograd::Engine") || f.name.contains("AccumulateGrad")) {
        let grad = any(&|f| f.name.contains("AccumulateGrad") || f.name.contains("accumulate_grad"));
        return if grad || !freed_in_trace { Category::Gradients } else { Category::Temporaries };
    }
    if any(&|f| is_python(f) && (f.name == "forward" || f.name == "_call_impl" || f.name == "generate")) {
        return Category::Activations;
    }
    if any(&|f| {
        is_python(f)
            && matches!(f.name.as_str(), "_apply" | "to" | "cuda" | "load_state_dict" | "from_pretrained" | "reset_parameters" | "__init__")
    }) {
        return Category::Parameters;
    }
    Category::Other
}

/// `file.py:line:function` of the innermost Python frame outside PyTorch itself (the model or
/// user code line), as memory_viz `_frame_fmt` writes frames.
pub fn frame_key<F: Borrow<Frame>>(stack: &[F]) -> String {
    let fmt = |f: &Frame| format!("{}:{}:{}", f.filename.rsplit('/').next().unwrap_or(&f.filename), f.line, f.name);
    let py = || stack.iter().map(Borrow::borrow).filter(|f| is_python(f));
    py().find(|f| !f.filename.contains("/torch/")).or_else(|| py().next()).map(fmt).unwrap_or_else(|| {
        if stack.is_empty() {
            "<no frames recorded>".into()
        } else {
            "<non-python>".into()
        }
    })
}

/// Bytes and count under one key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Group {
    /// Frame or category name.
    pub key: String,
    /// Sum of sizes.
    pub bytes: u64,
    /// Number of allocations.
    pub count: usize,
}

/// One segment's use at dump time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SegmentUse {
    /// Base address.
    pub address: u64,
    /// Small or large pool.
    pub pool: &'static str,
    /// Reserved bytes.
    pub total: u64,
    /// Bytes in active blocks.
    pub active: u64,
    /// Cached free bytes (total - active).
    pub free: u64,
    /// Blocks in the segment.
    pub blocks: usize,
}

/// Everything `vram explain` reports for one device.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Explanation {
    /// CUDA device.
    pub device: usize,
    /// Trace entries.
    pub events: usize,
    /// memory_viz peak of allocated bytes (requested sizes).
    pub peak_allocated: u64,
    /// Trace index of that peak.
    pub peak_allocated_event: Option<usize>,
    /// Microseconds between the first traced event and the peak, when timestamps exist.
    pub peak_allocated_after_us: Option<i64>,
    /// Reserved bytes (segments) at the allocated peak.
    pub reserved_at_peak: u64,
    /// memory_viz peak of reserved bytes (segments).
    pub peak_reserved: u64,
    /// Trace index of that peak.
    pub peak_reserved_event: Option<usize>,
    /// Live allocations at the allocated peak, by inferred category (largest first).
    pub by_category: Vec<Group>,
    /// Live allocations at the allocated peak, by allocating frame (top 10).
    pub by_frame: Vec<Group>,
    /// The largest live allocations at the peak (top 10): (bytes, category, frame).
    pub largest: Vec<(u64, Category, String)>,
    /// Reserved bytes at dump time.
    pub final_reserved: u64,
    /// Active bytes at dump time.
    pub final_active: u64,
    /// Segments with the most cached free bytes at dump time (top 10).
    pub fragmented_segments: Vec<SegmentUse>,
    /// Number of segments at dump time.
    pub segments: usize,
    /// (trace index, allocated, reserved) after each change, at most ~2000 points.
    pub timeline: Vec<(usize, u64, u64)>,
}

fn top(map: HashMap<String, (u64, usize)>, n: usize) -> Vec<Group> {
    let mut v: Vec<Group> = map.into_iter().map(|(key, (bytes, count))| Group { key, bytes, count }).collect();
    v.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.key.cmp(&b.key)));
    v.truncate(n);
    v
}

impl Snapshot {
    /// Addresses freed at some point after trace index `at`.
    fn freed_after(&self, device: usize, at: usize) -> AddrSet {
        let trace = self.traces.get(device).map(Vec::as_slice).unwrap_or(&[]);
        trace.iter().skip(at.saturating_add(1)).filter(|e| Self::is_free(View::Allocated, e.action)).map(|e| e.addr).collect()
    }

    /// The frames of stack `id`, innermost first (none for an unknown id).
    pub fn stack_frames(&self, id: StackId) -> Vec<&Frame> {
        let ids = self.stacks.get(id as usize).map(Vec::as_slice).unwrap_or(&[]);
        ids.iter().filter_map(|&f| self.frames.get(f as usize)).collect()
    }

    /// The full explanation of `device`.
    pub fn explain(&self, device: usize) -> Explanation {
        let trace = self.traces.get(device).map(Vec::as_slice).unwrap_or(&[]);
        let init = self.initial(device, View::Allocated);
        let alloc = self.timeline_from(device, View::Allocated, &init);
        let reserved = self.timeline(device, View::Reserved);
        let live = self.live_from(device, alloc.peak_event, &init);
        let freed = self.freed_after(device, alloc.peak_event.unwrap_or(0));
        let (mut by_cat, mut by_frame, mut largest) = (HashMap::new(), HashMap::new(), Vec::new());
        // Category and frame key depend only on the stack (and whether freed): worked out once each.
        let mut seen: Vec<Option<(String, [Option<Category>; 2])>> = vec![None; self.stacks.len()];
        let mut stack_of = |id: StackId, freed: bool| {
            let frames = self.stack_frames(id);
            let slot = seen.get_mut(id as usize);
            let (key, cats) = match slot {
                Some(s) => s.get_or_insert_with(|| (frame_key(&frames), [None; 2])),
                None => return (categorize(&frames, freed), frame_key(&frames)),
            };
            (*cats[freed as usize].get_or_insert_with(|| categorize(&frames, freed)), key.clone())
        };
        for l in &live {
            let (cat, key) = stack_of(l.stack, freed.contains(&l.addr));
            let cat = if cat == Category::Unknown && l.event.is_some() { Category::NoFrames } else { cat };
            let e = by_cat.entry(cat.describe().to_string()).or_insert((0u64, 0usize));
            *e = (e.0.saturating_add(l.size), e.1 + 1);
            let e = by_frame.entry(key.clone()).or_insert((0u64, 0usize));
            *e = (e.0.saturating_add(l.size), e.1 + 1);
            if largest.len() < 10 {
                largest.push((l.size, cat, key));
            }
        }
        let mut segs: Vec<SegmentUse> = self
            .segments
            .iter()
            .filter(|s| s.device == device as i64)
            .map(|s| SegmentUse {
                address: s.address,
                pool: if s.small { "small" } else { "large" },
                total: s.total_size,
                active: s.active(),
                free: s.total_size.saturating_sub(s.active()),
                blocks: s.blocks.len(),
            })
            .collect();
        let final_reserved = segs.iter().map(|s| s.total).sum();
        let final_active = segs.iter().map(|s| s.active).sum();
        let segments = segs.len();
        segs.sort_by(|a, b| b.free.cmp(&a.free).then(a.address.cmp(&b.address)));
        segs.truncate(10);
        let t0 = trace.iter().find_map(|e| e.time_us);
        let peak_allocated_after_us = alloc.peak_event.and_then(|i| trace.get(i)?.time_us).zip(t0).map(|(t, s)| t - s);
        let timeline = merge_timelines(&alloc, &reserved, 2000);
        let reserved_at_peak = value_at(&reserved, alloc.peak_event);
        Explanation {
            device,
            events: trace.len(),
            peak_allocated: alloc.peak,
            peak_allocated_event: alloc.peak_event,
            peak_allocated_after_us,
            reserved_at_peak,
            peak_reserved: reserved.peak,
            peak_reserved_event: reserved.peak_event,
            by_category: top(by_cat, usize::MAX),
            by_frame: top(by_frame, 10),
            largest,
            final_reserved,
            final_active,
            fragmented_segments: segs,
            segments,
            timeline,
        }
    }
}

/// A timeline's total just after trace index `at` (its initial value before any action).
fn value_at(t: &Timeline, at: Option<usize>) -> u64 {
    let Some(at) = at else { return t.initial };
    let i = t.points.partition_point(|(e, _)| *e <= at);
    if i == 0 {
        t.initial
    } else {
        t.points[i - 1].1
    }
}

/// Both timelines on one axis of trace indices, thinned to about `max` points (keeping each
/// bucket's maximum so no peak disappears from the chart).
fn merge_timelines(a: &Timeline, r: &Timeline, max: usize) -> Vec<(usize, u64, u64)> {
    // One linear merge of the two sorted point lists (each holds its value until its next point).
    let (mut i, mut j, mut va, mut vr) = (0, 0, a.initial, r.initial);
    let mut all = Vec::with_capacity(a.points.len() + r.points.len());
    while i < a.points.len() || j < r.points.len() {
        let next = a.points.get(i).map_or(usize::MAX, |p| p.0).min(r.points.get(j).map_or(usize::MAX, |p| p.0));
        while i < a.points.len() && a.points[i].0 == next {
            va = a.points[i].1;
            i += 1;
        }
        while j < r.points.len() && r.points[j].0 == next {
            vr = r.points[j].1;
            j += 1;
        }
        all.push((next, va, vr));
    }
    let step = all.len().div_ceil(max.max(1)).max(1);
    all.chunks(step).map(|c| (c[0].0, c.iter().map(|p| p.1).max().unwrap_or(0), c.iter().map(|p| p.2).max().unwrap_or(0))).collect()
}

/// One row of the estimate-versus-snapshot comparison.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CompareRow {
    /// Category (or total).
    pub what: String,
    /// What the estimate says, in bytes.
    pub estimate: u64,
    /// What the snapshot holds at its peak, in bytes.
    pub snapshot: u64,
}

/// Put an estimate beside a snapshot's peak, category by category, and name the largest gap.
pub fn compare(est: &crate::memory::Estimate, ex: &Explanation) -> (Vec<CompareRow>, String) {
    let cat_of = |name: &str| {
        if name.starts_with("parameters") || name.starts_with("autocast") {
            Category::Parameters
        } else if name.starts_with("gradients") {
            Category::Gradients
        } else if name.starts_with("optimizer states") {
            Category::OptimizerState
        } else if name.starts_with("activations") || name.starts_with("logits") || name.starts_with("input") || name.starts_with("KV cache")
        {
            Category::Activations
        } else {
            Category::Temporaries
        }
    };
    let snap_bytes = |c: Category| ex.by_category.iter().filter(|g| g.key == c.describe()).map(|g| g.bytes).sum::<u64>();
    let cats = [Category::Parameters, Category::Gradients, Category::OptimizerState, Category::Activations, Category::Temporaries];
    let mut rows: Vec<CompareRow> = cats
        .iter()
        .map(|&c| CompareRow {
            what: c.describe().into(),
            estimate: est
                .components
                .iter()
                .filter(|k| k.kind == crate::memory::Kind::Allocated && cat_of(&k.name) == c)
                .map(|k| k.bytes)
                .sum(),
            snapshot: snap_bytes(c),
        })
        .collect();
    let rest: u64 = ex.by_category.iter().filter(|g| !cats.iter().any(|c| c.describe() == g.key)).map(|g| g.bytes).sum();
    rows.push(CompareRow { what: "other / unknown".into(), estimate: 0, snapshot: rest });
    let worst = rows.iter().max_by_key(|r| r.estimate.abs_diff(r.snapshot)).map(|r| r.what.clone()).unwrap_or_default();
    rows.push(CompareRow { what: "peak allocated".into(), estimate: est.peak_allocated, snapshot: ex.peak_allocated });
    let diff = est.peak_allocated as i128 - ex.peak_allocated as i128;
    let verdict = format!(
        "the estimate is {} {:.2} GiB ({:+.1}%) than the snapshot's peak allocated; the largest difference is in {worst} (categories in the snapshot are inferred from stack frames)",
        if diff >= 0 { "higher by" } else { "lower by" },
        crate::units::gib(u64::try_from(diff.unsigned_abs()).unwrap_or(u64::MAX)),
        diff as f64 / ex.peak_allocated.max(1) as f64 * 100.0
    );
    (rows, verdict)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(name: &str, file: &str) -> Frame {
        Frame { name: name.into(), filename: file.into(), line: 1 }
    }

    #[test]
    fn custom_autograd_function_forward_is_an_activation() {
        // Regression: bitsandbytes' MatMul4Bit.forward runs under torch/autograd/function.py.
        let stack = [
            f("forward", "/x/bitsandbytes/autograd/_functions.py"),
            f("apply", "/x/torch/autograd/function.py"),
            f("forward", "/x/modeling_llama.py"),
        ];
        assert_eq!(categorize(&stack, true), Category::Activations);
        let bwd = [f("torch::autograd::Engine::thread_main", "engine.cpp")];
        assert_eq!(categorize(&bwd, true), Category::Temporaries);
        assert_eq!(categorize(&bwd, false), Category::Gradients);
        assert_eq!(categorize(&[f("step", "/x/torch/optim/adamw.py")], false), Category::OptimizerState);
        assert_eq!(categorize::<Frame>(&[], false), Category::Unknown);
    }
}
