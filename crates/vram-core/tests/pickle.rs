//! The pickle reader never runs code: hostile pickles are refused by name, real snapshots load.

use vram_core::pickle::{load, PickleError};

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
