//! A pickle reader that can never run code: it understands only the opcodes that build plain
//! data (dicts, lists, tuples, str, bytes, int, float, bool, None) and refuses every opcode that
//! imports or calls something (`GLOBAL`, `STACK_GLOBAL`, `REDUCE`, `BUILD`, `INST`, `OBJ`,
//! `NEWOBJ`, extension codes, persistent ids), naming what the file tried to import.
//!
//! That is all a `torch.cuda.memory._snapshot()` needs: the opcodes below are the ones
//! `pickle.dumps` emits for nested builtins (CPython Lib/pickletools.py documents each) and the
//! same set PyTorch's own reader `unpickle` in torch/utils/viz/MemoryViz.js accepts.
//!
//! Memory is bounded by the input: every object, memo entry and stack slot is created by at
//! least one input byte, and `BINPUT` indices beyond the input length are refused, so a hostile
//! file of n bytes can make at most O(n) allocations. Values live in an arena and refer to each
//! other by index, so shared (memoized) objects are never copied and no traversal recurses.
//! Strings borrow from the input, and dicts that repeat an earlier dict's keys (every trace
//! entry and frame of a snapshot) keep only their values, so a 100 MB snapshot loads in a few
//! hundred MB without an allocation per object.

use thiserror::Error;

/// Why a pickle was refused.
#[derive(Debug, Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum PickleError {
    /// The pickle wants to import (and so possibly run) something.
    #[error("refusing to load: pickle imports {module}.{name} (a memory snapshot holds only plain data; this file is not one, or was tampered with)")]
    Import {
        /// Module named by the pickle.
        module: String,
        /// Attribute named by the pickle.
        name: String,
    },
    /// An opcode that calls or builds objects, or that this reader does not know.
    #[error("refusing to load: pickle opcode {name} (0x{opcode:02x}) at byte {offset} is not plain data")]
    Opcode {
        /// Opcode byte.
        opcode: u8,
        /// Its pickletools name, or "unknown".
        name: &'static str,
        /// Byte offset in the file.
        offset: usize,
    },
    /// The bytes are not a well-formed pickle.
    #[error("malformed pickle at byte {offset}: {message}")]
    Malformed {
        /// Byte offset in the file.
        offset: usize,
        /// What is wrong.
        message: String,
    },
}

/// Index of an object in the [`Pickle`] arena.
pub type Id = u32;

/// One pickled value. Containers and strings are indices into the arena.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    /// Python `None`.
    None,
    /// Python `bool`.
    Bool(bool),
    /// Python `int` that fits 64 bits.
    Int(i64),
    /// Python `float`.
    Float(f64),
    /// Python `str`.
    Str(Id),
    /// Python `bytes`.
    Bytes(Id),
    /// Python `list`.
    List(Id),
    /// Python `tuple`.
    Tuple(Id),
    /// Python `dict`.
    Dict(Id),
}

#[derive(Debug)]
enum Obj<'a> {
    // Strings and bytes borrow from the input: no copy, no allocation per string.
    Str(&'a str),
    Bytes(&'a [u8]),
    Seq(Vec<Value>),
    Dict(Vec<(Value, Value)>),
    /// A dict filled by one SETITEMS with the same keys (the same memoized strings, in the same
    /// order) as an earlier one, as every trace entry and frame of a snapshot is: the keys are
    /// stored once in `shapes`, the values at `values[start..start + keys]`. No allocation per
    /// dict, half the memory of the pairs.
    Record {
        shape: u32,
        start: u32,
    },
}

/// A record value in 8 bytes instead of 16: the low 4 bits tag it, the rest hold an int that
/// fits 60 bits, a bool or an arena id; anything else (larger ints, floats) goes to `spill`.
/// Halves the largest table of a snapshot (8 values per trace entry).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Packed(u64);

const TAG_BITS: u32 = 4;

impl Packed {
    fn pack(v: Value, spill: &mut Vec<Value>) -> Packed {
        let id = |id: Id, tag: u64| Packed((u64::from(id) << TAG_BITS) | tag);
        match v {
            Value::None => Packed(0),
            Value::Bool(b) => Packed(1 + u64::from(b)),
            Value::Int(i) if (i << TAG_BITS) >> TAG_BITS == i => Packed(((i << TAG_BITS) as u64) | 3),
            Value::Str(i) => id(i, 4),
            Value::Bytes(i) => id(i, 5),
            Value::List(i) => id(i, 6),
            Value::Tuple(i) => id(i, 7),
            Value::Dict(i) => id(i, 8),
            Value::Int(_) | Value::Float(_) => {
                spill.push(v);
                Packed(((spill.len() as u64 - 1) << TAG_BITS) | 9)
            }
        }
    }
    fn unpack(self, spill: &[Value]) -> Value {
        let (tag, rest) = (self.0 & 0xf, self.0 >> TAG_BITS);
        match tag {
            1 => Value::Bool(false),
            2 => Value::Bool(true),
            3 => Value::Int((self.0 as i64) >> TAG_BITS),
            4 => Value::Str(rest as Id),
            5 => Value::Bytes(rest as Id),
            6 => Value::List(rest as Id),
            7 => Value::Tuple(rest as Id),
            8 => Value::Dict(rest as Id),
            9 => spill.get(rest as usize).copied().unwrap_or(Value::None),
            _ => Value::None,
        }
    }
}

/// The values of a record dict (see [`Pickle::record`]).
#[derive(Debug, Clone, Copy)]
pub struct Record<'p> {
    /// Its shape: an index for [`Pickle::shape_keys`].
    pub shape: u32,
    values: &'p [Packed],
    spill: &'p [Value],
}

impl Record<'_> {
    /// The value of the `i`-th key of the shape.
    pub fn get(&self, i: usize) -> Option<Value> {
        self.values.get(i).map(|p| p.unpack(self.spill))
    }
    /// Number of values.
    pub fn len(&self) -> usize {
        self.values.len()
    }
    /// Whether the record has no values.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

/// A loaded pickle: the arena of objects and the root value.
#[derive(Debug)]
pub struct Pickle<'a> {
    objs: Vec<Obj<'a>>,
    shapes: Vec<Vec<Value>>,
    values: Vec<Packed>,
    spill: Vec<Value>,
    /// The value the pickle evaluates to.
    pub root: Value,
}

/// Most nested MARKs accepted (CPython has no limit; real snapshots use a handful).
const MAX_MARKS: usize = 4096;

/// Most distinct record shapes (key lists); later dicts are stored as pairs. A snapshot has a
/// handful (trace entry, frame, block, segment), and the bound keeps the shape search constant.
const MAX_SHAPES: usize = 64;

/// The (key, value) pairs of a dict, in insertion order.
pub struct Items<'p> {
    inner: ItemsInner<'p>,
}

enum ItemsInner<'p> {
    Pairs(std::slice::Iter<'p, (Value, Value)>),
    Record(std::iter::Zip<std::slice::Iter<'p, Value>, std::slice::Iter<'p, Packed>>, &'p [Value]),
}

impl Iterator for Items<'_> {
    type Item = (Value, Value);
    fn next(&mut self) -> Option<(Value, Value)> {
        match &mut self.inner {
            ItemsInner::Pairs(it) => it.next().copied(),
            ItemsInner::Record(it, spill) => it.next().map(|(k, v)| (*k, v.unpack(spill))),
        }
    }
}

impl DoubleEndedIterator for Items<'_> {
    fn next_back(&mut self) -> Option<(Value, Value)> {
        match &mut self.inner {
            ItemsInner::Pairs(it) => it.next_back().copied(),
            ItemsInner::Record(it, spill) => it.next_back().map(|(k, v)| (*k, v.unpack(spill))),
        }
    }
}

impl<'a> Pickle<'a> {
    /// The string behind a value, if it is a `str`.
    pub fn str(&self, v: Value) -> Option<&'a str> {
        match (v, self.obj(v)) {
            (Value::Str(_), Some(Obj::Str(s))) => Some(s),
            _ => None,
        }
    }
    /// The bytes behind a value, if it is a `bytes`.
    pub fn bytes(&self, v: Value) -> Option<&'a [u8]> {
        match (v, self.obj(v)) {
            (Value::Bytes(_), Some(Obj::Bytes(b))) => Some(b),
            _ => None,
        }
    }
    /// The items of a list or tuple.
    pub fn seq(&self, v: Value) -> Option<&[Value]> {
        match (v, self.obj(v)) {
            (Value::List(_) | Value::Tuple(_), Some(Obj::Seq(s))) => Some(s),
            _ => None,
        }
    }
    /// The (key, value) pairs of a dict, in insertion order.
    pub fn items(&self, v: Value) -> Option<Items<'_>> {
        let inner = match (v, self.obj(v)?) {
            (Value::Dict(_), Obj::Dict(d)) => ItemsInner::Pairs(d.iter()),
            (Value::Dict(_), Obj::Record { shape, start }) => {
                let keys = self.shapes.get(*shape as usize)?;
                let start = *start as usize;
                let values = self.values.get(start..start.checked_add(keys.len())?)?;
                ItemsInner::Record(keys.iter().zip(values.iter()), &self.spill)
            }
            _ => return None,
        };
        Some(Items { inner })
    }
    /// A record dict's shape (an index into its key list, see [`Pickle::shape_keys`]) and its
    /// values; `None` for a dict stored as pairs or anything else.
    pub fn record(&self, v: Value) -> Option<Record<'_>> {
        match (v, self.obj(v)?) {
            (Value::Dict(_), Obj::Record { shape, start }) => {
                let n = self.shapes.get(*shape as usize)?.len();
                let start = *start as usize;
                let values = self.values.get(start..start.checked_add(n)?)?;
                Some(Record { shape: *shape, values, spill: &self.spill })
            }
            _ => None,
        }
    }
    /// The keys of a record shape, in order.
    pub fn shape_keys(&self, shape: u32) -> &[Value] {
        self.shapes.get(shape as usize).map(Vec::as_slice).unwrap_or(&[])
    }
    /// `dict[key]` for a string key (the last assignment wins, as in Python).
    pub fn get(&self, dict: Value, key: &str) -> Option<Value> {
        self.items(dict)?.rev().find(|(k, _)| self.str(*k) == Some(key)).map(|(_, v)| v)
    }
    fn obj(&self, v: Value) -> Option<&Obj<'a>> {
        match v {
            Value::Str(i) | Value::Bytes(i) | Value::List(i) | Value::Tuple(i) | Value::Dict(i) => self.objs.get(i as usize),
            _ => None,
        }
    }
}

/// Parse a pickle (protocols 2 to 5) holding only plain data.
pub fn load(data: &[u8]) -> Result<Pickle<'_>, PickleError> {
    let mut m = Machine {
        data,
        pos: 0,
        objs: Vec::new(),
        shapes: Vec::new(),
        last_shape: 0,
        values: Vec::new(),
        spill: Vec::new(),
        stack: Vec::new(),
        marks: Vec::new(),
        memo: Vec::new(),
    };
    let root = m.run()?;
    Ok(Pickle { objs: m.objs, shapes: m.shapes, values: m.values, spill: m.spill, root })
}

struct Machine<'a> {
    data: &'a [u8],
    pos: usize,
    objs: Vec<Obj<'a>>,
    shapes: Vec<Vec<Value>>,
    /// The shape the last record used (consecutive dicts usually share one).
    last_shape: usize,
    values: Vec<Packed>,
    spill: Vec<Value>,
    stack: Vec<Value>,
    marks: Vec<usize>,
    memo: Vec<Option<Value>>,
}

impl<'a> Machine<'a> {
    fn err(&self, message: impl Into<String>) -> PickleError {
        PickleError::Malformed { offset: self.pos, message: message.into() }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], PickleError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.data.len())
            .ok_or_else(|| self.err(format!("truncated: {n} more bytes expected")))?;
        let s = &self.data[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, PickleError> {
        // The most frequent read (every opcode): no slice, no length arithmetic.
        match self.data.get(self.pos) {
            Some(&b) => {
                self.pos += 1;
                Ok(b)
            }
            None => Err(self.err("truncated: 1 more bytes expected")),
        }
    }
    fn u16(&mut self) -> Result<usize, PickleError> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]) as usize)
    }
    fn u32(&mut self) -> Result<usize, PickleError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
    }
    fn u64(&mut self) -> Result<usize, PickleError> {
        let b = self.take(8)?;
        let v = u64::from_le_bytes(b.try_into().expect("8 bytes"));
        usize::try_from(v).map_err(|_| self.err("length does not fit this machine"))
    }
    fn new_obj(&mut self, o: Obj<'a>) -> Result<Id, PickleError> {
        let id = Id::try_from(self.objs.len()).map_err(|_| self.err("more than 2^32 objects"))?;
        self.objs.push(o);
        Ok(id)
    }
    fn push_str(&mut self, n: usize) -> Result<(), PickleError> {
        let b = self.take(n)?;
        let s = std::str::from_utf8(b).map_err(|_| self.err("string is not UTF-8"))?;
        let id = self.new_obj(Obj::Str(s))?;
        self.stack.push(Value::Str(id));
        Ok(())
    }
    fn push_bytes(&mut self, n: usize) -> Result<(), PickleError> {
        let b = self.take(n)?;
        let id = self.new_obj(Obj::Bytes(b))?;
        self.stack.push(Value::Bytes(id));
        Ok(())
    }
    fn pop(&mut self) -> Result<Value, PickleError> {
        self.stack.pop().ok_or_else(|| self.err("stack underflow"))
    }
    fn top(&self) -> Result<Value, PickleError> {
        self.stack.last().copied().ok_or_else(|| self.err("stack underflow"))
    }
    /// Pop the last MARK: the stack length when it was pushed.
    fn mark(&mut self) -> Result<usize, PickleError> {
        let m = self.marks.pop().ok_or_else(|| self.err("no MARK on the stack"))?;
        if m > self.stack.len() {
            return Err(self.err("MARK above the stack top"));
        }
        Ok(m)
    }
    /// Items pushed since the last MARK, removed from the stack.
    fn pop_mark(&mut self) -> Result<Vec<Value>, PickleError> {
        let m = self.mark()?;
        Ok(self.stack.split_off(m))
    }
    /// The container just below the MARK at `m` (the target of APPENDS / SETITEMS).
    fn below(&self, m: usize) -> Result<Value, PickleError> {
        m.checked_sub(1).and_then(|i| self.stack.get(i)).copied().ok_or_else(|| self.err("stack underflow"))
    }
    /// Arena index of the list `v`, or an error if it is not one.
    fn list_index(&self, v: Value) -> Result<usize, PickleError> {
        match v {
            Value::List(i) if matches!(self.objs.get(i as usize), Some(Obj::Seq(_))) => Ok(i as usize),
            _ => Err(self.err("APPEND target is not a list")),
        }
    }
    /// Arena index of the dict `v`, or an error if it is not one.
    fn dict_index(&self, v: Value) -> Result<usize, PickleError> {
        match v {
            Value::Dict(i) if matches!(self.objs.get(i as usize), Some(Obj::Dict(_) | Obj::Record { .. })) => Ok(i as usize),
            _ => Err(self.err("SETITEM target is not a dict")),
        }
    }
    /// APPENDS: move the items above the MARK into the list below it (no temporary vector).
    fn appends(&mut self) -> Result<(), PickleError> {
        let m = self.mark()?;
        let i = self.list_index(self.below(m)?)?;
        if let Some(Obj::Seq(s)) = self.objs.get_mut(i) {
            s.extend_from_slice(&self.stack[m..]);
        }
        self.stack.truncate(m);
        Ok(())
    }
    /// SETITEMS: move the pairs above the MARK into the dict below it (as a record when the
    /// dict is still empty and its keys repeat a known shape).
    fn setitems(&mut self) -> Result<(), PickleError> {
        let m = self.mark()?;
        if (self.stack.len() - m) % 2 != 0 {
            return Err(self.err("odd number of items for SETITEMS"));
        }
        let i = self.dict_index(self.below(m)?)?;
        let fresh = matches!(self.objs.get(i), Some(Obj::Dict(d)) if d.is_empty());
        if let Some(rec) = fresh.then(|| self.record(m)).flatten() {
            self.objs[i] = rec;
        } else {
            self.unrecord(i);
            if let Some(Obj::Dict(d)) = self.objs.get_mut(i) {
                d.extend(self.stack[m..].chunks_exact(2).map(|p| (p[0], p[1])));
            }
        }
        self.stack.truncate(m);
        Ok(())
    }
    /// The items above `m` as a record, if their keys are strings matching (or making) a shape.
    fn record(&mut self, m: usize) -> Option<Obj<'a>> {
        let items = &self.stack[m..];
        let same = |keys: &Vec<Value>| keys.len() * 2 == items.len() && keys.iter().zip(items.iter().step_by(2)).all(|(k, i)| k == i);
        let shape = match self.shapes.get(self.last_shape).filter(|k| same(k)) {
            Some(_) => self.last_shape,
            None => match self.shapes.iter().position(same) {
                Some(s) => s,
                None if self.shapes.len() < MAX_SHAPES
                    && !items.is_empty()
                    && items.iter().step_by(2).all(|k| matches!(k, Value::Str(_))) =>
                {
                    self.shapes.push(items.iter().step_by(2).copied().collect());
                    self.shapes.len() - 1
                }
                None => return None,
            },
        };
        let start = u32::try_from(self.values.len()).ok()?;
        self.last_shape = shape;
        for v in items.iter().skip(1).step_by(2) {
            self.values.push(Packed::pack(*v, &mut self.spill));
        }
        Some(Obj::Record { shape: shape as u32, start })
    }
    /// Turn record `i` back into pairs (it is being added to).
    fn unrecord(&mut self, i: usize) {
        if let Some(Obj::Record { shape, start }) = self.objs.get(i) {
            let keys = &self.shapes[*shape as usize];
            let vals = &self.values[*start as usize..*start as usize + keys.len()];
            self.objs[i] = Obj::Dict(keys.iter().copied().zip(vals.iter().map(|v| v.unpack(&self.spill))).collect());
        }
    }
    fn push1(&mut self, list: Value, v: Value) -> Result<(), PickleError> {
        let i = self.list_index(list)?;
        if let Some(Obj::Seq(s)) = self.objs.get_mut(i) {
            s.push(v);
        }
        Ok(())
    }
    fn set1(&mut self, dict: Value, k: Value, v: Value) -> Result<(), PickleError> {
        let i = self.dict_index(dict)?;
        self.unrecord(i);
        if let Some(Obj::Dict(d)) = self.objs.get_mut(i) {
            d.push((k, v));
        }
        Ok(())
    }
    fn push_seq(&mut self, items: Vec<Value>, list: bool) -> Result<(), PickleError> {
        let id = self.new_obj(Obj::Seq(items))?;
        self.stack.push(if list { Value::List(id) } else { Value::Tuple(id) });
        Ok(())
    }
    fn push_dict(&mut self, items: Vec<Value>) -> Result<(), PickleError> {
        if items.len() % 2 != 0 {
            return Err(self.err("odd number of items for a dict"));
        }
        let pairs = items.chunks_exact(2).map(|p| (p[0], p[1])).collect();
        let id = self.new_obj(Obj::Dict(pairs))?;
        self.stack.push(Value::Dict(id));
        Ok(())
    }
    fn memo_put(&mut self, idx: usize) -> Result<(), PickleError> {
        // Bound: a memo index larger than the input cannot come from a real pickler.
        if idx > self.data.len() {
            return Err(self.err(format!("memo index {idx} larger than the file")));
        }
        let v = self.top()?;
        if idx >= self.memo.len() {
            self.memo.resize(idx + 1, None);
        }
        self.memo[idx] = Some(v);
        Ok(())
    }
    fn memo_get(&mut self, idx: usize) -> Result<(), PickleError> {
        let v = self.memo.get(idx).copied().flatten().ok_or_else(|| self.err(format!("memo index {idx} was never stored")))?;
        self.stack.push(v);
        Ok(())
    }
    fn long(&mut self, n: usize) -> Result<(), PickleError> {
        let b = self.take(n)?;
        if n > 8 {
            return Err(self.err(format!("integer of {n} bytes does not fit 64 bits")));
        }
        let neg = b.last().is_some_and(|&x| x & 0x80 != 0);
        let mut buf = if neg { [0xffu8; 8] } else { [0u8; 8] };
        buf[..n].copy_from_slice(b);
        self.stack.push(Value::Int(i64::from_le_bytes(buf)));
        Ok(())
    }
    /// The text-line argument of GLOBAL / INST (`module\nname\n`).
    fn line(&mut self) -> Result<String, PickleError> {
        let rest = &self.data[self.pos..];
        let n = rest.iter().position(|&c| c == b'\n').ok_or_else(|| self.err("unterminated line"))?;
        let s = String::from_utf8_lossy(&rest[..n]).into_owned();
        self.pos += n + 1;
        Ok(s)
    }
    fn refuse_import(&mut self, op: u8) -> PickleError {
        let named = match op {
            b'c' | b'i' => self.line().and_then(|m| Ok((m, self.line()?))).ok(),
            _ => {
                let n = self.stack.len();
                let s = |v: Option<&Value>| v.and_then(|v| if let Value::Str(i) = v { self.objs.get(*i as usize) } else { None });
                match (s(n.checked_sub(2).and_then(|i| self.stack.get(i))), s(self.stack.last())) {
                    (Some(Obj::Str(m)), Some(Obj::Str(a))) => Some((m.to_string(), a.to_string())),
                    _ => None,
                }
            }
        };
        match named {
            Some((module, name)) => PickleError::Import { module, name },
            None => PickleError::Opcode { opcode: op, name: opcode_name(op), offset: self.pos.saturating_sub(1) },
        }
    }

    fn run(&mut self) -> Result<Value, PickleError> {
        loop {
            let op = self.u8()?;
            match op {
                0x80 => {
                    let v = self.u8()?;
                    if !(2..=5).contains(&v) {
                        return Err(self.err(format!("pickle protocol {v} (2 to 5 supported)")));
                    }
                }
                0x95 => {
                    self.u64()?; // FRAME: a length hint only
                }
                b'.' => return self.pop(),
                b'(' => {
                    if self.marks.len() >= MAX_MARKS {
                        return Err(self.err("too many nested MARKs"));
                    }
                    self.marks.push(self.stack.len());
                }
                b'0' => {
                    self.pop()?;
                }
                b'1' => {
                    let m = self.mark()?;
                    self.stack.truncate(m);
                }
                b'2' => {
                    let v = self.top()?;
                    self.stack.push(v);
                }
                b'N' => self.stack.push(Value::None),
                0x88 => self.stack.push(Value::Bool(true)),
                0x89 => self.stack.push(Value::Bool(false)),
                b'J' => {
                    let b = self.take(4)?;
                    self.stack.push(Value::Int(i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as i64));
                }
                b'K' => {
                    let v = self.u8()?;
                    self.stack.push(Value::Int(v as i64));
                }
                b'M' => {
                    let v = self.u16()?;
                    self.stack.push(Value::Int(v as i64));
                }
                0x8a => {
                    let n = self.u8()? as usize;
                    self.long(n)?;
                }
                0x8b => {
                    let n = self.u32()?;
                    self.long(n)?;
                }
                b'G' => {
                    let b = self.take(8)?;
                    self.stack.push(Value::Float(f64::from_be_bytes(b.try_into().expect("8 bytes"))));
                }
                0x8c => {
                    let n = self.u8()? as usize;
                    self.push_str(n)?;
                }
                b'X' => {
                    let n = self.u32()?;
                    self.push_str(n)?;
                }
                0x8d => {
                    let n = self.u64()?;
                    self.push_str(n)?;
                }
                b'C' => {
                    let n = self.u8()? as usize;
                    self.push_bytes(n)?;
                }
                b'B' => {
                    let n = self.u32()?;
                    self.push_bytes(n)?;
                }
                0x8e => {
                    let n = self.u64()?;
                    self.push_bytes(n)?;
                }
                b']' => self.push_seq(Vec::new(), true)?,
                b')' => self.push_seq(Vec::new(), false)?,
                b'}' => self.push_dict(Vec::new())?,
                b'l' => {
                    let items = self.pop_mark()?;
                    self.push_seq(items, true)?;
                }
                b't' => {
                    let items = self.pop_mark()?;
                    self.push_seq(items, false)?;
                }
                b'd' => {
                    let items = self.pop_mark()?;
                    self.push_dict(items)?;
                }
                0x85..=0x87 => {
                    let n = (op - 0x84) as usize;
                    let at = self.stack.len().checked_sub(n).ok_or_else(|| self.err("stack underflow"))?;
                    let items = self.stack.split_off(at);
                    self.push_seq(items, false)?;
                }
                b'a' => {
                    let v = self.pop()?;
                    let list = self.top()?;
                    self.push1(list, v)?;
                }
                b'e' => self.appends()?,
                b's' => {
                    let v = self.pop()?;
                    let k = self.pop()?;
                    let d = self.top()?;
                    self.set1(d, k, v)?;
                }
                b'u' => self.setitems()?,
                0x94 => {
                    // MEMOIZE appends; the bound of memo_put holds as every entry took a byte.
                    let v = self.top()?;
                    self.memo.push(Some(v));
                }
                b'q' => {
                    let idx = self.u8()? as usize;
                    self.memo_put(idx)?;
                }
                b'r' => {
                    let idx = self.u32()?;
                    self.memo_put(idx)?;
                }
                b'h' => {
                    let idx = self.u8()? as usize;
                    self.memo_get(idx)?;
                }
                b'j' => {
                    let idx = self.u32()?;
                    self.memo_get(idx)?;
                }
                b'c' | b'i' | 0x93 => return Err(self.refuse_import(op)),
                _ => return Err(PickleError::Opcode { opcode: op, name: opcode_name(op), offset: self.pos - 1 }),
            }
        }
    }
}

/// pickletools names of the opcodes refused, for the error message.
fn opcode_name(op: u8) -> &'static str {
    match op {
        b'R' => "REDUCE",
        b'b' => "BUILD",
        b'o' => "OBJ",
        b'i' => "INST",
        b'c' => "GLOBAL",
        0x93 => "STACK_GLOBAL",
        0x81 => "NEWOBJ",
        0x92 => "NEWOBJ_EX",
        0x82..=0x84 => "EXT",
        b'P' | b'Q' => "PERSID",
        0x8f => "EMPTY_SET",
        0x90 => "ADDITEMS",
        0x91 => "FROZENSET",
        0x96 => "BYTEARRAY8",
        0x97 | 0x98 => "NEXT_BUFFER",
        b'I' | b'L' | b'F' | b'S' | b'V' | b'T' | b'U' => "text-protocol value",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_dict() {
        // pickle.dumps({'a': [1, -2, 3.5, None, True], 'b': (300, 2**40)}, protocol=4)
        let data = b"\x80\x04\x95(\x00\x00\x00\x00\x00\x00\x00}\x94(\x8c\x01a\x94]\x94(K\x01J\xfe\xff\xff\xffG@\x0c\x00\x00\x00\x00\x00\x00N\x88e\x8c\x01b\x94M,\x01\x8a\x06\x00\x00\x00\x00\x00\x01\x86\x94u.";
        let p = load(data).unwrap();
        let a = p.seq(p.get(p.root, "a").unwrap()).unwrap();
        assert_eq!(a, &[Value::Int(1), Value::Int(-2), Value::Float(3.5), Value::None, Value::Bool(true)]);
        let b = p.seq(p.get(p.root, "b").unwrap()).unwrap();
        assert_eq!(b, &[Value::Int(300), Value::Int(1 << 40)]);
    }

    #[test]
    fn packed_values_round_trip() {
        let mut spill = Vec::new();
        let edge = [i64::MIN, i64::MAX, (1 << 59) - 1, -(1 << 59), 1 << 59, -(1 << 59) - 1, 0, -1, 0x7f12_3456_7800];
        let mut vals: Vec<Value> = edge.iter().map(|&i| Value::Int(i)).collect();
        vals.extend([Value::None, Value::Bool(false), Value::Bool(true), Value::Float(-2.5), Value::Str(u32::MAX)]);
        vals.extend([Value::Bytes(7), Value::List(0), Value::Tuple(1), Value::Dict(u32::MAX - 1)]);
        let packed: Vec<Packed> = vals.iter().map(|v| Packed::pack(*v, &mut spill)).collect();
        let back: Vec<Value> = packed.iter().map(|p| p.unpack(&spill)).collect();
        assert_eq!(back, vals);
        assert_eq!(spill.len(), 5, "ints beyond 60 bits and floats are spilled: {spill:?}");
    }

    #[test]
    fn truncated_is_an_error() {
        assert!(matches!(load(b"\x80\x04}\x94(\x8c\x05ab"), Err(PickleError::Malformed { .. })));
        assert!(load(b"").is_err());
    }
}
