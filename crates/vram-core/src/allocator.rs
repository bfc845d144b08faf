//! A model of PyTorch's CUDA caching allocator (`DeviceCachingAllocator` in
//! c10/cuda/CUDACachingAllocator.cpp): given a sequence of tensor allocations and frees it says
//! how much memory the allocator reserves from the driver (what nvidia-smi sees beyond the
//! context), and why.
//!
//! Rules modelled, each from that file (function names as in PyTorch 2.x):
//! - `round_size`: requests round up to a multiple of 512 bytes (`kMinBlockSize`).
//! - `get_pool`: rounded requests of at most 1 MiB (`kSmallSize`) use the small pool, others the
//!   large pool; blocks never move between pools or streams.
//! - `get_allocation_size`: a new small-pool segment is 2 MiB (`kSmallBuffer`); a large request
//!   under 10 MiB (`kMinLargeAlloc`) gets a 20 MiB segment (`kLargeBuffer`); above that the
//!   segment is the request rounded up to 2 MiB (`kRoundLarge`).
//! - `get_free_block`: best fit, the smallest cached block of the same pool and stream that is
//!   large enough (ties by address); with `max_split_size_mb`, a request below the limit never
//!   takes an oversize block and a request above it never takes a block `kLargeBuffer` (20 MiB)
//!   larger than itself.
//! - `should_split`: the remainder of a small block becomes a free block when at least 512 bytes;
//!   of a large block when the request is below `max_split_size` and the remainder exceeds 1 MiB.
//! - `free_block` / `try_merge_blocks`: a freed block merges with free neighbours of its segment.
//! - `garbage_collection_threshold`: once reserved memory passes that fraction of the device,
//!   `garbage_collect_cached_blocks` returns cached whole segments before growing (modelled as
//!   releasing every fully free segment; PyTorch releases the oldest first until under the
//!   threshold — an approximation, stated as such in the reason).
//! - `expandable_segments:True`: one segment per pool and stream grows by mapping pages
//!   (`ExpandableSegment`, 2 MiB pages in the small pool, 20 MiB in the large one); a request
//!   that fits nowhere extends the segment's free tail instead of cudaMalloc'ing a new one.
//! - When a new segment would exceed the device, `release_cached_blocks` frees every fully free
//!   segment and retries (the retry after an OOM in `malloc`).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;

use crate::error::{Error, Result};

/// `kMinBlockSize`: allocation granularity.
pub const MIN_BLOCK: u64 = 512;
/// `kSmallSize`: largest request served by the small pool.
pub const SMALL_SIZE: u64 = 1 << 20;
/// `kSmallBuffer`: small-pool segment size.
pub const SMALL_BUFFER: u64 = 2 << 20;
/// `kLargeBuffer`: segment size for large requests under `kMinLargeAlloc`.
pub const LARGE_BUFFER: u64 = 20 << 20;
/// `kMinLargeAlloc`: requests from here on get a segment of their own size.
pub const MIN_LARGE_ALLOC: u64 = 10 << 20;
/// `kRoundLarge`: rounding of large segments.
pub const ROUND_LARGE: u64 = 2 << 20;

/// The `PYTORCH_CUDA_ALLOC_CONF` options the model honours.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct AllocConf {
    /// `max_split_size_mb`, in bytes (`None`: unlimited, PyTorch's default).
    pub max_split_size: Option<u64>,
    /// `garbage_collection_threshold` (fraction of device memory, 0 < t < 1).
    pub garbage_collection_threshold: Option<f64>,
    /// `expandable_segments:True`.
    pub expandable_segments: bool,
}

impl AllocConf {
    /// Parse `PYTORCH_CUDA_ALLOC_CONF` (`key:value` pairs separated by commas, as
    /// `CUDAAllocatorConfig::parseArgs` reads them). Options this model does not simulate
    /// (`roundup_power2_divisions`, `pinned_*`, `backend`, `release_lock_on_cudamalloc`) are always
    /// refused by name, and unknown keys are an error: none is ever silently ignored.
    pub fn parse(s: &str) -> Result<AllocConf> {
        let mut c = AllocConf::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part.split_once(':').ok_or_else(|| bad(part, "expected key:value"))?;
            let (k, v) = (k.trim(), v.trim());
            match k {
                "max_split_size_mb" => {
                    let mb: u64 = v.parse().map_err(|_| bad(part, "max_split_size_mb takes a whole number of MiB"))?;
                    // CUDAAllocatorConfig: values below kLargeBuffer/1 MiB (20) are raised to 20 MiB.
                    c.max_split_size = Some(mb.max(LARGE_BUFFER >> 20).checked_mul(1 << 20).ok_or_else(|| bad(part, "too large"))?);
                }
                "garbage_collection_threshold" => {
                    let t: f64 = v.parse().map_err(|_| bad(part, "a fraction between 0 and 1"))?;
                    if !(t > 0.0 && t < 1.0) {
                        return Err(bad(part, "garbage_collection_threshold must be > 0 and < 1 (PyTorch refuses other values)"));
                    }
                    c.garbage_collection_threshold = Some(t);
                }
                "expandable_segments" => {
                    c.expandable_segments = match v {
                        "True" | "true" => true,
                        "False" | "false" => false,
                        _ => return Err(bad(part, "expandable_segments takes True or False")),
                    }
                }
                "roundup_power2_divisions" | "backend" | "pinned_use_cuda_host_register" | "pinned_num_register_threads" | "release_lock_on_cudamalloc" => {
                    return Err(bad(part, "this option is not modelled; remove it to get an estimate (the model would silently ignore it)"))
                }
                _ => return Err(bad(part, "unknown option; PyTorch knows max_split_size_mb, garbage_collection_threshold, expandable_segments, roundup_power2_divisions, ...")),
            }
        }
        Ok(c)
    }
}

fn bad(part: &str, hint: &str) -> Error {
    Error::InvalidValue { what: "PYTORCH_CUDA_ALLOC_CONF option".into(), value: part.into(), hint: hint.into() }
}

/// `round_size`: bytes the allocator hands out for a request.
pub fn round_size(size: u64) -> u64 {
    if size < MIN_BLOCK {
        MIN_BLOCK
    } else {
        size.div_ceil(MIN_BLOCK).saturating_mul(MIN_BLOCK)
    }
}

/// `get_allocation_size`: bytes of a new segment for a rounded request.
pub fn segment_size(rounded: u64) -> u64 {
    if rounded <= SMALL_SIZE {
        SMALL_BUFFER
    } else if rounded < MIN_LARGE_ALLOC {
        LARGE_BUFFER
    } else {
        rounded.div_ceil(ROUND_LARGE).saturating_mul(ROUND_LARGE)
    }
}

#[derive(Debug, Clone, Copy)]
struct Blk {
    size: u64,
    free: bool,
    seg: usize,
    requested: u64,
}

#[derive(Debug, Clone, Copy)]
struct Seg {
    base: u64,
    size: u64,
    small: bool,
    stream: i64,
    live: bool,
}

/// Free-list key: (small pool, stream, size, address) — the order of PyTorch's `BlockComparatorSize`.
type Key = (bool, i64, u64, u64);

/// What the model found at the peak of reserved memory.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// Largest reserved bytes at any moment.
    pub peak_reserved: u64,
    /// Largest allocated bytes (rounded block sizes, as `max_memory_allocated`).
    pub peak_allocated: u64,
    /// Segments held at the reserved peak.
    pub segments_at_peak: usize,
    /// Live blocks at the reserved peak.
    pub live_blocks_at_peak: usize,
    /// Cached free bytes at the reserved peak (reserved - allocated).
    pub cached_at_peak: u64,
    /// cudaMalloc calls made.
    pub segment_allocs: usize,
    /// Segments released to make room or by garbage collection.
    pub segment_frees: usize,
}

impl Report {
    /// One-line reason: where reserved memory peaks and how much of it is cached free blocks.
    pub fn reason(&self) -> String {
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        format!(
            "caching allocator model (c10/cuda/CUDACachingAllocator.cpp): reserved peaks at {:.2} GiB in {} segments, {:.2} GiB of it cached free blocks beside {} live blocks (fragmentation, 2/20 MiB segment rounding)",
            gib(self.peak_reserved),
            self.segments_at_peak,
            gib(self.cached_at_peak),
            self.live_blocks_at_peak
        )
    }
}

/// The simulated allocator.
#[derive(Debug, Clone)]
pub struct Allocator {
    conf: AllocConf,
    capacity: Option<u64>,
    blocks: BTreeMap<u64, Blk>,
    free: BTreeSet<Key>,
    segs: Vec<Seg>,
    expandable: HashMap<(bool, i64), usize>,
    next_base: u64,
    reserved: u64,
    allocated: u64,
    live_blocks: usize,
    report: Report,
}

impl Allocator {
    /// A fresh allocator; `capacity` is the device memory available to it (None: unlimited).
    pub fn new(conf: AllocConf, capacity: Option<u64>) -> Allocator {
        let report = Report {
            peak_reserved: 0,
            peak_allocated: 0,
            segments_at_peak: 0,
            live_blocks_at_peak: 0,
            cached_at_peak: 0,
            segment_allocs: 0,
            segment_frees: 0,
        };
        Allocator {
            conf,
            capacity,
            blocks: BTreeMap::new(),
            free: BTreeSet::new(),
            segs: Vec::new(),
            expandable: HashMap::new(),
            next_base: 1 << 40,
            reserved: 0,
            allocated: 0,
            live_blocks: 0,
            report,
        }
    }

    /// Bytes reserved now.
    pub fn reserved(&self) -> u64 {
        self.reserved
    }
    /// Bytes allocated now (rounded).
    pub fn allocated(&self) -> u64 {
        self.allocated
    }
    /// The running report.
    pub fn report(&self) -> &Report {
        &self.report
    }

    /// Cached (free) blocks now, as (segment size, block size), largest blocks first.
    pub fn cached_blocks(&self) -> Vec<(u64, u64)> {
        let mut v: Vec<(u64, u64)> = self.free.iter().map(|&(_, _, size, addr)| (self.segs[self.blocks[&addr].seg].size, size)).collect();
        v.sort_by_key(|b| std::cmp::Reverse(b.1));
        v
    }

    fn key(&self, addr: u64, b: &Blk) -> Key {
        let s = &self.segs[b.seg];
        (s.small, s.stream, b.size, addr)
    }

    /// Allocate `size` bytes on `stream`; returns the block's (model) address.
    pub fn malloc(&mut self, size: u64, stream: i64) -> Result<u64> {
        let rounded = round_size(size);
        let small = rounded <= SMALL_SIZE;
        let addr = match self.best_fit(small, stream, rounded) {
            Some(a) => a,
            None => self.grow(small, stream, rounded)?,
        };
        let mut b = self.blocks[&addr];
        self.free.remove(&self.key(addr, &b));
        if self.should_split(small, b.size, rounded) {
            let rest = Blk { size: b.size - rounded, free: true, seg: b.seg, requested: 0 };
            self.blocks.insert(addr + rounded, rest);
            self.free.insert(self.key(addr + rounded, &rest));
            b.size = rounded;
        }
        b.free = false;
        b.requested = size;
        self.blocks.insert(addr, b);
        self.allocated += b.size;
        self.live_blocks += 1;
        self.observe();
        Ok(addr)
    }

    /// Free the block at `addr` (as returned by [`Allocator::malloc`]); unknown addresses are an error.
    pub fn free(&mut self, addr: u64) -> Result<()> {
        let mut b = match self.blocks.get(&addr) {
            Some(b) if !b.free => *b,
            _ => {
                return Err(Error::InvalidValue {
                    what: "allocator free".into(),
                    value: format!("{addr:#x}"),
                    hint: "no live block at that address".into(),
                })
            }
        };
        self.allocated -= b.size;
        self.live_blocks -= 1;
        let mut start = addr;
        // try_merge_blocks with the previous neighbour.
        if let Some((&pa, &p)) = self.blocks.range(..addr).next_back() {
            if p.free && p.seg == b.seg && pa + p.size == addr {
                self.free.remove(&self.key(pa, &p));
                self.blocks.remove(&addr);
                b.size += p.size;
                start = pa;
            }
        }
        let next = start + b.size;
        if let Some(&n) = self.blocks.get(&next) {
            if n.free && n.seg == b.seg {
                self.free.remove(&self.key(next, &n));
                self.blocks.remove(&next);
                b.size += n.size;
            }
        }
        b.free = true;
        self.blocks.insert(start, b);
        self.free.insert(self.key(start, &b));
        Ok(())
    }

    /// `empty_cache()`: release every fully free segment.
    pub fn empty_cache(&mut self) {
        let whole: Vec<usize> = (0..self.segs.len()).filter(|&i| self.segs[i].live && self.whole_free(i).is_some()).collect();
        for i in whole {
            self.release(i);
        }
    }

    fn whole_free(&self, i: usize) -> Option<Blk> {
        let s = self.segs[i];
        self.blocks.get(&s.base).filter(|b| b.free && b.size == s.size).copied()
    }

    fn release(&mut self, i: usize) {
        if let Some(b) = self.whole_free(i) {
            let base = self.segs[i].base;
            self.free.remove(&self.key(base, &b));
            self.blocks.remove(&base);
            self.reserved -= self.segs[i].size;
            self.segs[i].live = false;
            self.expandable.retain(|_, v| *v != i);
            self.report.segment_frees += 1;
        }
    }

    fn best_fit(&self, small: bool, stream: i64, rounded: u64) -> Option<u64> {
        let (_, st, size, addr) = *self.free.range((small, stream, rounded, 0)..).next()?;
        if st != stream || self.segs[self.blocks[&addr].seg].small != small {
            return None;
        }
        if let Some(max) = self.conf.max_split_size {
            // get_free_block: no oversize block for a small request, nor a far larger one for a large.
            if (rounded < max && size >= max) || (rounded >= max && size >= rounded.saturating_add(LARGE_BUFFER)) {
                return None;
            }
        }
        Some(addr)
    }

    fn should_split(&self, small: bool, size: u64, rounded: u64) -> bool {
        let remaining = size - rounded;
        if small {
            remaining >= MIN_BLOCK
        } else {
            rounded < self.conf.max_split_size.unwrap_or(u64::MAX) && remaining > SMALL_SIZE
        }
    }

    fn fits(&self, extra: u64) -> bool {
        self.capacity.is_none_or(|c| self.reserved.saturating_add(extra) <= c)
    }

    /// No cached block fits: garbage-collect if configured, then a new segment (or a grown one).
    fn grow(&mut self, small: bool, stream: i64, rounded: u64) -> Result<u64> {
        let want = if self.conf.expandable_segments { rounded } else { segment_size(rounded) };
        if let (Some(t), Some(c)) = (self.conf.garbage_collection_threshold, self.capacity) {
            if self.reserved.saturating_add(want) as f64 > t * c as f64 {
                self.empty_cache();
            }
        }
        if !self.fits(want) {
            self.empty_cache(); // release_cached_blocks, then retry
        }
        if self.conf.expandable_segments {
            return self.extend(small, stream, rounded);
        }
        if !self.fits(want) {
            return Err(self.oom(want));
        }
        let i = self.new_segment(small, stream, want);
        Ok(self.segs[i].base)
    }

    fn oom(&self, want: u64) -> Error {
        Error::InvalidValue {
            what: "allocation".into(),
            value: format!("{want} bytes"),
            hint: format!("out of memory: {} bytes reserved of {} available", self.reserved, self.capacity.unwrap_or(0)),
        }
    }

    fn new_segment(&mut self, small: bool, stream: i64, size: u64) -> usize {
        let base = self.next_base;
        // Model addresses only need to be distinct; an expandable segment may grow, so it gets
        // 64 TiB of room (there are at most a few: one per pool and stream).
        let room = if self.conf.expandable_segments { 1 << 46 } else { size };
        self.next_base = self.next_base.saturating_add(room).saturating_add(MIN_BLOCK);
        self.segs.push(Seg { base, size, small, stream, live: true });
        let i = self.segs.len() - 1;
        let b = Blk { size, free: true, seg: i, requested: 0 };
        self.blocks.insert(base, b);
        self.free.insert(self.key(base, &b));
        self.reserved += size;
        self.report.segment_allocs += 1;
        i
    }

    /// Expandable segments: map pages onto the pool's segment tail.
    fn extend(&mut self, small: bool, stream: i64, rounded: u64) -> Result<u64> {
        let page = if small { SMALL_BUFFER } else { LARGE_BUFFER };
        let Some(&i) = self.expandable.get(&(small, stream)) else {
            let size = rounded.div_ceil(page).saturating_mul(page);
            if !self.fits(size) {
                return Err(self.oom(size));
            }
            let i = self.new_segment(small, stream, size);
            self.expandable.insert((small, stream), i);
            return Ok(self.segs[i].base);
        };
        let s = self.segs[i];
        let end = s.base + s.size;
        let tail = self.blocks.range(..end).next_back().map(|(&a, &b)| (a, b)).filter(|(_, b)| b.free && b.seg == i);
        let have = tail.map_or(0, |(_, b)| b.size);
        let add = (rounded - have.min(rounded)).div_ceil(page).saturating_mul(page);
        if !self.fits(add) {
            return Err(self.oom(add));
        }
        self.segs[i].size += add;
        self.reserved += add;
        let start = match tail {
            Some((a, b)) => {
                self.free.remove(&self.key(a, &b));
                a
            }
            None => end,
        };
        let b = Blk { size: have + add, free: true, seg: i, requested: 0 };
        self.blocks.insert(start, b);
        self.free.insert(self.key(start, &b));
        Ok(start)
    }

    fn observe(&mut self) {
        let r = &mut self.report;
        r.peak_allocated = r.peak_allocated.max(self.allocated);
        if self.reserved > r.peak_reserved {
            r.peak_reserved = self.reserved;
            r.segments_at_peak = self.segs.iter().filter(|s| s.live).count();
            r.live_blocks_at_peak = self.live_blocks;
            r.cached_at_peak = self.reserved - self.allocated;
        }
    }
}

/// One request of an allocation sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Allocate `size` bytes as tensor `id` on stream 0.
    Alloc {
        /// Caller's tensor id.
        id: u64,
        /// Bytes requested.
        size: u64,
    },
    /// Free tensor `id`.
    Free {
        /// Caller's tensor id.
        id: u64,
    },
}

/// Run a sequence through a fresh allocator and report its peaks.
pub fn simulate(ops: &[Op], conf: AllocConf, capacity: Option<u64>) -> Result<Report> {
    let mut a = Allocator::new(conf, capacity);
    let mut addrs: HashMap<u64, u64> = HashMap::new();
    for op in ops {
        match *op {
            Op::Alloc { id, size } => {
                let addr = a.malloc(size, 0)?;
                addrs.insert(id, addr);
            }
            Op::Free { id } => {
                if let Some(addr) = addrs.remove(&id) {
                    a.free(addr)?;
                }
            }
        }
    }
    Ok(a.report().clone())
}

/// Peak of the live rounded request sizes of a sequence (what the memory model calls peak
/// allocated; the allocator's own count adds unsplit remainders).
pub fn peak_requested(ops: &[Op]) -> u64 {
    let mut sizes: HashMap<u64, u64> = HashMap::new();
    let (mut live, mut peak) = (0u64, 0u64);
    for op in ops {
        match *op {
            Op::Alloc { id, size } => {
                let r = round_size(size);
                sizes.insert(id, r);
                live = live.saturating_add(r);
                peak = peak.max(live);
            }
            Op::Free { id } => live -= sizes.remove(&id).unwrap_or(0),
        }
    }
    peak
}

/// Replaying a snapshot's own allocation trace through the model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Replay {
    /// The snapshot's recorded peak reserved bytes (memory_viz segment timeline).
    pub recorded_peak_reserved: u64,
    /// The model's full report.
    pub model: Report,
    /// Allocations replayed.
    pub allocs: usize,
}

impl Replay {
    /// (model - recorded) / recorded.
    pub fn error(&self) -> f64 {
        (self.model.peak_reserved as f64 - self.recorded_peak_reserved as f64) / self.recorded_peak_reserved.max(1) as f64
    }
}

/// Replay device `device`'s trace: allocations live before the trace first (address order),
/// then every alloc and free_completed in order; a run of `segment_free` events (an
/// `empty_cache()` or the allocator's own OOM retry) empties the model's cache too.
pub fn replay(snap: &crate::snapshot::Snapshot, device: usize, conf: AllocConf) -> Result<Replay> {
    use crate::snapshot::{Action, View};
    let mut a = Allocator::new(conf, None);
    let mut map: HashMap<u64, u64> = HashMap::new();
    let mut pre = snap.live_at(device, None);
    pre.sort_by_key(|l| l.addr);
    for l in pre.iter().filter(|l| l.event.is_none()) {
        map.insert(l.addr, a.malloc(l.size, 0)?);
    }
    let (mut allocs, mut last_was_segment_free) = (0, false);
    for e in snap.traces.get(device).map(Vec::as_slice).unwrap_or(&[]) {
        match e.action {
            Action::Alloc => {
                map.insert(e.addr, a.malloc(e.size, e.stream)?);
                allocs += 1;
            }
            Action::FreeCompleted | Action::Free => {
                if let Some(m) = map.remove(&e.addr) {
                    a.free(m)?;
                }
            }
            Action::SegmentFree if !last_was_segment_free => a.empty_cache(),
            _ => {}
        }
        last_was_segment_free = e.action == Action::SegmentFree;
    }
    let recorded = snap.timeline(device, View::Reserved).peak;
    Ok(Replay { recorded_peak_reserved: recorded, model: a.report().clone(), allocs })
}

/// Most requests an allocation sequence may hold (beyond it the model is not run: bounded work).
pub const MAX_OPS: usize = 400_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_and_segment_sizes() {
        assert_eq!(round_size(1), 512);
        assert_eq!(round_size(513), 1024);
        assert_eq!(segment_size(512), SMALL_BUFFER);
        assert_eq!(segment_size(SMALL_SIZE + 512), LARGE_BUFFER);
        assert_eq!(segment_size(MIN_LARGE_ALLOC), MIN_LARGE_ALLOC);
        assert_eq!(segment_size(MIN_LARGE_ALLOC + 1), 12 << 20);
    }

    #[test]
    fn small_requests_share_a_2mib_segment() {
        let ops: Vec<Op> = (0..4).map(|id| Op::Alloc { id, size: 1000 }).collect();
        let r = simulate(&ops, AllocConf::default(), None).unwrap();
        assert_eq!(r.peak_reserved, SMALL_BUFFER);
        assert_eq!(r.peak_allocated, 4 * 1024);
    }

    #[test]
    fn freed_block_is_reused_and_merged() {
        let mut a = Allocator::new(AllocConf::default(), None);
        let x = a.malloc(4 << 20, 0).unwrap(); // 20 MiB segment, split
        let y = a.malloc(4 << 20, 0).unwrap();
        a.free(x).unwrap();
        a.free(y).unwrap();
        let z = a.malloc(16 << 20, 0).unwrap(); // fits the merged 20 MiB block
        assert_eq!(z, x);
        assert_eq!(a.reserved(), LARGE_BUFFER);
    }

    #[test]
    fn conf_parsing() {
        let c = AllocConf::parse("expandable_segments:True, max_split_size_mb:128").unwrap();
        assert!(c.expandable_segments);
        assert_eq!(c.max_split_size, Some(128 << 20));
        assert!(AllocConf::parse("bogus:1").is_err());
        assert!(AllocConf::parse("garbage_collection_threshold:1.5").is_err());
    }

    #[test]
    fn expandable_segments_grow_in_pages() {
        let c = AllocConf { expandable_segments: true, ..AllocConf::default() };
        let ops = [Op::Alloc { id: 0, size: 30 << 20 }, Op::Alloc { id: 1, size: 30 << 20 }];
        let r = simulate(&ops, c, None).unwrap();
        assert_eq!(r.peak_reserved, 60 << 20);
        assert_eq!(r.segment_allocs, 1);
    }
}
