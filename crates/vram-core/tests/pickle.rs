//! The pickle reader never runs code: hostile pickles are refused by name, real snapshots load.

use vram_core::pickle::{load, PickleError, Value};

#[test]
fn refuses_os_system_via_global() {
    // A hand-written exploit: GLOBAL os.system, then REDUCE with ("echo PWNED",).
    let evil = b"\x80\x02cos\nsystem\nq\x00X\n\x00\x00\x00echo PWNEDq\x01\x85q\x02Rq\x03.";
    let err = load(evil).unwrap_err();
    assert_eq!(err, PickleError::Import { module: "os".into(), name: "system".into() });
    assert!(err.to_string().starts_with("refusing to load: pickle imports os.system"), "{err}");
}

#[test]
fn refuses_stack_global_as_pickle_dumps_writes_it() {
    // pickle.dumps(obj_whose_reduce_is_os_system, protocol=4) on Linux.
    let evil = b"\x80\x04\x95%\x00\x00\x00\x00\x00\x00\x00\x8c\x05posix\x94\x8c\x06system\x94\x93\x94\x8c\necho PWNED\x94\x85\x94R\x94.";
    let err = load(evil).unwrap_err();
    assert_eq!(err.to_string().split(" (").next().unwrap(), "refusing to load: pickle imports posix.system");
}

#[test]
fn refuses_reduce_build_and_unknown_opcodes() {
    for (bytes, name) in [(&b"\x80\x04N)R."[..], "REDUCE"), (b"\x80\x04}}b.", "BUILD"), (b"\x80\x04\xff.", "unknown")] {
        match load(bytes) {
            Err(PickleError::Opcode { name: n, .. }) => assert_eq!(n, name),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn hostile_sizes_are_bounded() {
    // BINUNICODE claiming 4 GiB, a memo index far beyond the file, a LONG4 of 2^31 bytes.
    for bytes in [&b"\x80\x04X\xff\xff\xff\xff"[..], b"\x80\x04N\x72\xff\xff\xff\x7f.", b"\x80\x04\x8b\x00\x00\x00\x80."] {
        assert!(matches!(load(bytes), Err(PickleError::Malformed { .. })), "{bytes:?}");
    }
}

#[test]
fn deep_nesting_does_not_overflow() {
    // 100k nested lists: ']' then (']' 'a')* is flat in the reader; no recursion anywhere.
    let mut v = b"\x80\x04]".to_vec();
    for _ in 0..100_000 {
        v.extend_from_slice(b"]\x94");
    }
    v.extend(std::iter::repeat_n(b'a', 100_000));
    v.push(b'.');
    assert!(load(&v).is_ok());
}

#[test]
fn dicts_sharing_keys_read_the_same_after_later_setitem() {
    // [{'a': 1, 'b': 2}, {'a': 3, 'b': 4}] with the second dict's keys memo references (BINGET),
    // as pickle.dumps writes repeated keys, then d2['a'] = 5 by a later SETITEM.
    let data = b"\x80\x04]\x94(}\x94(\x8c\x01a\x94K\x01\x8c\x01b\x94K\x02u}\x94(h\x02K\x03h\x03K\x04uh\x02K\x05se.";
    let p = load(data).unwrap();
    let l = p.seq(p.root).unwrap();
    let (d1, d2) = (l[0], l[1]);
    assert_eq!(p.get(d1, "a"), Some(Value::Int(1)));
    assert_eq!(p.get(d1, "b"), Some(Value::Int(2)));
    assert_eq!(p.get(d2, "a"), Some(Value::Int(5)), "the last assignment wins");
    assert_eq!(p.get(d2, "b"), Some(Value::Int(4)));
    let keys: Vec<_> = p.items(d2).unwrap().map(|(k, v)| (p.str(k).unwrap().to_string(), v)).collect();
    assert_eq!(keys, [("a".into(), Value::Int(3)), ("b".into(), Value::Int(4)), ("a".into(), Value::Int(5))]);
}

#[test]
fn many_distinct_key_sets_still_read_correctly() {
    // 200 dicts {'k<i>': i}, each with a new key: more shapes than are kept as records.
    let mut v = b"\x80\x04](".to_vec();
    for i in 0..200u8 {
        let key = format!("k{i}");
        v.extend_from_slice(b"}(\x8c");
        v.push(key.len() as u8);
        v.extend_from_slice(key.as_bytes());
        v.extend_from_slice(&[b'K', i, b'u']);
    }
    v.extend_from_slice(b"e.");
    let p = load(&v).unwrap();
    for (i, d) in p.seq(p.root).unwrap().iter().enumerate() {
        assert_eq!(p.get(*d, &format!("k{i}")), Some(Value::Int(i as i64)));
        assert_eq!(p.items(*d).unwrap().count(), 1);
    }
}

#[test]
fn setitems_on_a_list_is_refused() {
    // ']' '(' 'a' 1 'u': SETITEMS whose target is a list.
    let err = load(b"\x80\x04](\x8c\x01aK\x01u.").unwrap_err();
    assert!(err.to_string().contains("SETITEM target is not a dict"), "{err}");
}

/// A tiny pickler for the snapshot test below: strings memoized and reused as pickle.dumps does.
struct P {
    out: Vec<u8>,
    memo: std::collections::HashMap<String, u8>,
    next: u8,
}

impl P {
    fn memoize(&mut self) {
        self.out.push(0x94);
        self.next += 1;
    }
    fn s(&mut self, s: &str) {
        if let Some(&i) = self.memo.get(s) {
            self.out.extend_from_slice(&[b'h', i]);
            return;
        }
        self.out.extend_from_slice(&[0x8c, s.len() as u8]);
        self.out.extend_from_slice(s.as_bytes());
        self.memo.insert(s.into(), self.next);
        self.memoize();
    }
    fn entry(&mut self, items: &[(&str, &str)]) {
        self.out.push(b'}');
        self.memoize();
        self.out.push(b'(');
        for (k, v) in items {
            self.s(k);
            match v.parse::<u16>() {
                Ok(n) => {
                    self.out.push(b'M');
                    self.out.extend_from_slice(&n.to_le_bytes());
                }
                Err(_) => self.s(v),
            }
        }
        self.out.push(b'u');
    }
}

#[test]
fn snapshot_fields_read_the_same_from_records_and_pairs() {
    // Three entries with one key set, `action` given twice (Python keeps the last), then one
    // with a key set of its own: record positions must pick what a scan of the pairs picks.
    let mut p = P { out: b"\x80\x04}(".to_vec(), memo: Default::default(), next: 0 };
    p.s("segments");
    p.out.extend_from_slice(b"]");
    p.s("device_traces");
    p.out.extend_from_slice(b"]](");
    let dup = [("action", "oom"), ("addr", "2048"), ("size", "512"), ("action", "alloc")];
    for _ in 0..3 {
        p.entry(&dup);
    }
    p.entry(&[("size", "512"), ("action", "free_completed"), ("addr", "2048")]);
    p.out.extend_from_slice(b"eau.");
    let snap = vram_core::snapshot::parse(&p.out).unwrap();
    let t = &snap.traces[0];
    assert_eq!(t.len(), 4);
    for e in &t[..3] {
        assert_eq!((e.action, e.addr, e.size), (vram_core::snapshot::Action::Alloc, 2048, 512));
    }
    assert_eq!((t[3].action, t[3].addr, t[3].size), (vram_core::snapshot::Action::FreeCompleted, 2048, 512));
}
