//! The pickle VM: CPython's own encodings of every protocol, hand-built opcodes, hostile
//! and truncated input.

#[path = "../../tests/src/snapshots.rs"]
#[allow(dead_code)]
mod snapshots;

use fragprobe_shared::torch::pickle::{read_pickle_bytes, Handle, Pickle, PickleError, Val};

/// The strings of list `h`.
fn strs(p: &Pickle, h: Handle) -> Vec<String> {
    p.seq(h)
        .unwrap()
        .iter()
        .map(|&x| p.str(x).unwrap().to_string())
        .collect()
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

// pickle.dumps({'segments': [{'address': 2**40 + 512, 'size': -5, 'big': 2**70,
//   'neg': -2**65, 'f': 1.5, 'ok': True, 'no': None, 't': (1, 'two'), 'u': 'é\n'}],
//   'shared': 'x'}, protocol=P) from CPython 3, P = 0..5.
const CPYTHON: [&str; 6] = [
    "286470300a567365676d656e74730a70310a286c70320a286470330a56616464726573730a70340a4c313039393531313632383238384c0a735673697a650a70350a492d350a73566269670a70360a4c313138303539313632303731373431313330333432344c0a73566e65670a70370a4c2d33363839333438383134373431393130333233324c0a7356660a70380a46312e350a73566f6b0a70390a4930310a73566e6f0a7031300a4e7356740a7031310a2849310a5674776f0a7031320a747031330a7356750a7031340a56e95c75303030610a7031350a736173567368617265640a7031360a56780a7031370a732e",
    "7d71002858080000007365676d656e747371015d71027d71032858070000006164647265737371044c313039393531313632383238384c0a580400000073697a6571054afbffffff580300000062696771064c313138303539313632303731373431313330333432344c0a58030000006e656771074c2d33363839333438383134373431393130333233324c0a5801000000667108473ff800000000000058020000006f6b71094930310a58020000006e6f710a4e580100000074710b284b01580300000074776f710c74710d580100000075710e5803000000c3a90a710f7561580600000073686172656471105801000000787111752e",
    "80027d71002858080000007365676d656e747371015d71027d71032858070000006164647265737371048a06000200000001580400000073697a6571054afbffffff580300000062696771068a0900000000000000004058030000006e656771078a090000000000000000fe5801000000667108473ff800000000000058020000006f6b71098858020000006e6f710a4e580100000074710b4b01580300000074776f710c86710d580100000075710e5803000000c3a90a710f7561580600000073686172656471105801000000787111752e",
    "80037d71002858080000007365676d656e747371015d71027d71032858070000006164647265737371048a06000200000001580400000073697a6571054afbffffff580300000062696771068a0900000000000000004058030000006e656771078a090000000000000000fe5801000000667108473ff800000000000058020000006f6b71098858020000006e6f710a4e580100000074710b4b01580300000074776f710c86710d580100000075710e5803000000c3a90a710f7561580600000073686172656471105801000000787111752e",
    "80049595000000000000007d94288c087365676d656e7473945d947d94288c0761646472657373948a060002000000018c0473697a65944afbffffff8c03626967948a090000000000000000408c036e6567948a090000000000000000fe8c016694473ff80000000000008c026f6b94888c026e6f944e8c0174944b018c0374776f9486948c0175948c03c3a90a9475618c06736861726564948c017894752e",
    "80059595000000000000007d94288c087365676d656e7473945d947d94288c0761646472657373948a060002000000018c0473697a65944afbffffff8c03626967948a090000000000000000408c036e6567948a090000000000000000fe8c016694473ff80000000000008c026f6b94888c026e6f944e8c0174944b018c0374776f9486948c0175948c03c3a90a9475618c06736861726564948c017894752e",
];

fn check_plain(p: &Pickle) {
    let root = p.root();
    let segs = p.seq(p.get(root, "segments").unwrap()).unwrap();
    assert_eq!(segs.len(), 1);
    let e = segs[0];
    let int = |k: &str| p.int(p.get(e, k).unwrap()).unwrap();
    assert_eq!(int("address"), (1i128 << 40) + 512);
    assert_eq!(int("size"), -5);
    assert_eq!(int("big"), 1i128 << 70, "LONG beyond 64 bits");
    assert_eq!(int("neg"), -(1i128 << 65));
    assert_eq!(p.float(p.get(e, "f").unwrap()), Some(1.5));
    assert_eq!(p.bool(p.get(e, "ok").unwrap()), Some(true));
    assert!(matches!(p.view(p.get(e, "no").unwrap()), Val::None));
    match p.view(p.get(e, "t").unwrap()) {
        Val::Tuple([a, b]) => {
            assert_eq!(p.int(*a), Some(1));
            assert_eq!(p.str(*b), Some("two"));
        }
        other => panic!("t is {other:?}"),
    }
    assert_eq!(p.str(p.get(e, "u").unwrap()), Some("é\n"));
    assert_eq!(p.str(p.get(root, "shared").unwrap()), Some("x"));
}

#[test]
fn reads_cpython_output_of_every_protocol() {
    for (proto, h) in CPYTHON.iter().enumerate() {
        let p = read_pickle_bytes(&hex(h)).unwrap_or_else(|e| panic!("protocol {proto}: {e}"));
        check_plain(&p);
        if proto >= 2 {
            assert_eq!(p.protocol as usize, proto);
        }
    }
}

#[test]
fn every_truncation_reports_its_offset() {
    for h in CPYTHON {
        let full = hex(h);
        for cut in 0..full.len() {
            match read_pickle_bytes(&full[..cut]) {
                Err(PickleError::Truncated { offset, .. }) => assert_eq!(offset, cut as u64),
                other => panic!("cut at {cut}: {other:?}"),
            }
        }
    }
    let e = read_pickle_bytes(&hex("80048c05616263")).unwrap_err();
    assert!(e.to_string().contains("truncated at byte 7"), "{e}");
}

#[test]
fn globals_are_refused_by_name() {
    // pickle.dumps of an object whose __reduce__ returns (os.system, ('true',)).
    let evil2 = hex("800263706f7369780a73797374656d0a710058040000007472756571018571025271032e");
    let e = read_pickle_bytes(&evil2).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("'posix.system'") && msg.contains("never executes pickles"),
        "{msg}"
    );
    assert!(matches!(
        e,
        PickleError::Code {
            opcode: "GLOBAL",
            ..
        }
    ));
    let evil4 =
        hex("8004951f000000000000008c05706f736978948c0673797374656d9493948c047472756594859452942e");
    let e = read_pickle_bytes(&evil4).unwrap_err();
    assert!(e.to_string().contains("'posix.system'"), "{e}");
    assert!(matches!(
        e,
        PickleError::Code {
            opcode: "STACK_GLOBAL",
            ..
        }
    ));
    // INST names its class inline.
    let e = read_pickle_bytes(b"(ios\nsystem\n.").unwrap_err();
    assert!(e.to_string().contains("'os.system'"), "{e}");
}

#[test]
fn object_building_opcodes_are_refused() {
    let cases: [(&[u8], &str); 9] = [
        (b"\x80\x02N)R.", "REDUCE"),
        (b"\x80\x02}}b.", "BUILD"),
        (b"\x80\x02(N)o.", "OBJ"),
        (b"\x80\x02N)\x81.", "NEWOBJ"),
        (b"\x80\x04N)}\x92.", "NEWOBJ_EX"),
        (b"\x80\x02\x82\x01.", "EXT1"),
        (b"\x80\x02Pabc\n.", "PERSID"),
        (b"\x80\x02NQ.", "BINPERSID"),
        (b"\x80\x05\x97.", "NEXT_BUFFER"),
    ];
    for (bytes, op) in cases {
        match read_pickle_bytes(bytes) {
            Err(PickleError::Code { opcode, .. }) => assert_eq!(opcode, op),
            other => panic!("{op}: {other:?}"),
        }
    }
    // Python 3 writes bytes in protocols 0–2 as a call to _codecs.encode: refused too.
    let e = read_pickle_bytes(b"\x80\x02c_codecs\nencode\nq\x00X\x01\x00\x00\x00aq\x01\x85R.")
        .unwrap_err();
    assert!(e.to_string().contains("'_codecs.encode'"), "{e}");
}

#[test]
fn hand_built_opcodes() {
    // LONG1 of 17 bytes: 2**128 (beyond i128) stays a big int; LONG4 of -1.
    let mut b = vec![0x80, 0x04, b']', b'('];
    b.extend([0x8a, 17]);
    b.extend([0u8; 16]);
    b.push(1);
    b.extend([0x8b, 1, 0, 0, 0, 0xff]);
    // SHORT_BINBYTES, BINBYTES8, BYTEARRAY8, BINUNICODE8, EMPTY_SET+ADDITEMS, FROZENSET.
    b.extend([b'C', 2, 0, 0xff]);
    b.extend([0x8e, 1, 0, 0, 0, 0, 0, 0, 0, 7]);
    b.extend([0x96, 0, 0, 0, 0, 0, 0, 0, 0]);
    b.extend([0x8d, 2, 0, 0, 0, 0, 0, 0, 0, b'h', b'i']);
    b.extend([0x8f, b'(', b'K', 3, b'K', 4, 0x90]);
    b.extend([b'(', b'K', 5, 0x91]);
    // FRAME is only a length hint.
    b.extend([0x95, 0, 0, 0, 0, 0, 0, 0, 0]);
    b.extend([
        b'I', b'4', b'2', b'\n', b'F', b'2', b'.', b'5', b'\n', b'e', b'.',
    ]);
    let p = read_pickle_bytes(&b).unwrap();
    let items = p.seq(p.root()).unwrap().to_vec();
    assert_eq!(items.len(), 10);
    match p.view(items[0]) {
        Val::BigInt(big) => {
            assert_eq!(big.le_bytes.len(), 17);
            assert!(!big.is_negative());
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(p.int(items[1]), Some(-1));
    assert!(matches!(p.view(items[2]), Val::Bytes([0, 0xff])));
    assert!(matches!(p.view(items[3]), Val::Bytes([7])));
    assert!(matches!(p.view(items[4]), Val::Bytes([])));
    assert_eq!(p.str(items[5]), Some("hi"));
    match p.view(items[6]) {
        Val::Set(s) => assert_eq!(
            s.iter().map(|&h| p.int(h).unwrap()).collect::<Vec<_>>(),
            [3, 4]
        ),
        other => panic!("{other:?}"),
    }
    assert!(matches!(p.view(items[7]), Val::FrozenSet([_])));
    assert_eq!(p.int(items[8]), Some(42));
    assert_eq!(p.float(items[9]), Some(2.5));
}

#[test]
fn memo_shares_mutable_containers() {
    // d = {'a': l, 'b': l} where l was appended to after being memoized.
    let p = read_pickle_bytes(&hex(
        "80027d71002858010000006171015d71024b076158010000006271036802752e",
    ))
    .unwrap();
    let a = p.get(p.root(), "a").unwrap();
    let b = p.get(p.root(), "b").unwrap();
    assert_eq!(a, b, "one list, two references");
    assert_eq!(p.seq(b).unwrap().len(), 1);
    // Strings are interned: equal text, one entry.
    let p = read_pickle_bytes(b"\x80\x04](\x8c\x03abc\x8c\x03abc\x8c\x03abce.").unwrap();
    assert_eq!(p.string_count(), 1);
}

#[test]
fn malformed_input_is_explained() {
    let cases: [&[u8]; 7] = [
        b"\xff",              // not an opcode
        b"\x80\x06N.",        // protocol from the future
        b"\x80\x02h\x05.",    // GET of a key never PUT
        b"\x80\x02.",         // STOP on an empty stack
        b"\x80\x02Ne.",       // APPENDS without MARK
        b"\x80\x02N(K\x01a.", // APPEND onto None across a MARK
        b"\x80\x02)K\x01a.",  // APPEND onto a tuple
    ];
    for c in cases {
        let e = read_pickle_bytes(c).unwrap_err();
        assert!(!matches!(e, PickleError::Truncated { .. }), "{c:?}: {e}");
        assert!(!e.to_string().is_empty());
    }
}

/// Protocol-4 opcodes for `[a, b, a2, b2]` where `a` and `a2` are distinct lists with
/// equal items (so the reader may share their storage), then more items appended to `a`
/// and to `b2`: each list must see only its own appends, and `items_key` must tell equal
/// items apart from different ones.
#[test]
fn lists_with_equal_items_stay_independent() {
    let mut b = vec![0x80, 4];
    // memo 0 = "x", memo 1 = "y"
    b.extend([0x8c, 1, b'x', 0x94, 0x8c, 1, b'y', 0x94, 0x30, 0x30]);
    b.push(b'('); // MARK for the outer list
    let list_xy = |b: &mut Vec<u8>| {
        b.extend([b']', 0x94, b'(']);
        b.extend([b'h', 0, b'j', 1, 0, 0, 0]); // BINGET 0, LONG_BINGET 1
        b.push(b'e'); // APPENDS
    };
    list_xy(&mut b); // a: memo 2
    b.extend([b']', 0x94, b'(', b'h', 1, b'h', 0, b'e']); // b = [y, x]: memo 3
    list_xy(&mut b); // a2: memo 4
    b.extend([b']', 0x94, b'(', b'h', 1, b'h', 0, b'e']); // b2 = [y, x]: memo 5
    b.push(b'l'); // LIST from the mark: [a, b, a2, b2]
                  // a.append("z") via APPEND on a fetched from the memo, then b2 += [x]
    b.extend([b'h', 2, 0x8c, 1, b'z', b'a', 0x30]);
    b.extend([b'h', 5, b'(', b'h', 0, b'e', 0x30]);
    b.push(b'.');
    let p = read_pickle_bytes(&b).unwrap();
    let outer = p.seq(p.root()).unwrap().to_vec();
    let strs = |h| strs(&p, h);
    assert_eq!(strs(outer[0]), ["x", "y", "z"]);
    assert_eq!(strs(outer[1]), ["y", "x"]);
    assert_eq!(strs(outer[2]), ["x", "y"]);
    assert_eq!(strs(outer[3]), ["y", "x", "x"]);
    assert_ne!(p.container_id(outer[0]), p.container_id(outer[2]));
    assert_ne!(p.items_key(outer[1]), p.items_key(outer[2]));
    assert_ne!(p.items_key(outer[1]), p.items_key(outer[3]));
    let (k0, k2) = (
        p.items_key(outer[0]).unwrap(),
        p.items_key(outer[2]).unwrap(),
    );
    assert!(k0 != k2 || strs(outer[0]) == strs(outer[2]));
}

/// A snapshot read in place (the whole file as one slice, as `load_snapshot` maps it) and
/// one read through a reader in small pieces decode to the same thing, so neither input
/// path's fast paths (frame lists shared by their bytes, runs of gets) change a value.
#[test]
fn slice_and_reader_inputs_agree() {
    if snapshots::dir().is_none() {
        return;
    }
    let dir = snapshots::dir().unwrap();
    for name in [
        "MAGMA27__memory_snapshot.pickle",
        "bcrafton__memory_snapshot.pickle",
    ] {
        let bytes = std::fs::read(dir.join(name)).unwrap();
        let whole = read_pickle_bytes(&bytes).unwrap();
        // A reader that hands out at most 7 bytes a call: every fast path meets the end
        // of its buffer somewhere.
        struct Dribble<'a>(&'a [u8]);
        impl std::io::Read for Dribble<'_> {
            fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
                let n = out.len().min(7).min(self.0.len());
                out[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let pieces = fragprobe_shared::torch::pickle::read_pickle(
            std::io::BufReader::with_capacity(7, Dribble(&bytes)),
        )
        .unwrap();
        let a = fragprobe_shared::torch::snapshot::decode(&whole).unwrap();
        let b = fragprobe_shared::torch::snapshot::decode(&pieces).unwrap();
        assert_eq!(format!("{a:?}"), format!("{b:?}"), "{name}");
        assert!(a.event_count() > 1000, "{name}");
    }
}

/// Two lists written with the very same get bytes mean different items when the memo slot
/// they name was stored over in between (Python's pickler never does that, a crafted file
/// can): the second list must not reuse the first one's items.
#[test]
fn equal_get_bytes_after_a_rebinding_read_the_new_items() {
    let mut b = vec![0x80, 4];
    b.extend([0x8c, 1, b'x', 0x94, 0x30]); // memo 0 = "x"
    b.extend([0x8c, 1, b'y', 0x94, 0x30]); // memo 1 = "y"
    b.push(b'('); // MARK for the outer list
    let list = [b']', 0x94, b'(', b'h', 0, b'h', 1, b'e'];
    b.extend(list); // [x, y]
    b.extend([0x8c, 1, b'z', b'q', 0, 0x30]); // BINPUT 0 = "z": slot 0 rebound
    b.extend(list); // the same bytes: now [z, y]
    b.extend([b'l', b'.']);
    let p = read_pickle_bytes(&b).unwrap();
    let outer = p.seq(p.root()).unwrap().to_vec();
    let strs = |h| strs(&p, h);
    assert_eq!(strs(outer[0]), ["x", "y"]);
    assert_eq!(strs(outer[1]), ["z", "y"]);
}

/// A list's own MEMOIZE can rebind a slot its gets then name (a file that mixes PUT and
/// MEMOIZE): the gets must see the new binding, the list itself, even though a list with
/// the same get bytes was read before.
#[test]
fn a_lists_own_memoize_rebinding_a_slot_it_reads_is_seen() {
    let mut b = vec![0x80, 4];
    b.extend([0x8c, 1, b'x', 0x94, 0x30]); // memo 0 = "x"
    b.extend([0x8c, 1, b'y', b'q', 5, 0x30]); // BINPUT 5 = "y"; the memo now has 2 entries
    b.push(b'('); // MARK for the outer list
    let list = [b']', 0x94, b'(', b'h', 0, b'h', 5, b'e'];
    b.extend(list); // memo 2 = [x, y]
    b.extend([0x8c, 1, b'z', 0x94, 0x30]); // memo 3
    b.extend([0x8c, 1, b'w', 0x94, 0x30]); // memo 4
    b.extend(list); // MEMOIZE at 5 rebinds "y" to this list: [x, <itself>]
    b.extend([b'l', b'.']);
    let p = read_pickle_bytes(&b).unwrap();
    let outer = p.seq(p.root()).unwrap().to_vec();
    assert_eq!(strs(&p, outer[0]), ["x", "y"]);
    let second = p.seq(outer[1]).unwrap();
    assert_eq!(p.str(second[0]), Some("x"));
    assert_eq!(p.container_id(second[1]), p.container_id(outer[1]));
}

/// Runs `f` on a thread with a small stack: input that makes the reader recurse per item
/// overflows it for sure, instead of depending on the main thread's 8 MiB.
fn on_small_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new()
        .stack_size(256 << 10)
        .spawn(f)
        .unwrap()
        .join()
        .expect("the reader must not overflow its stack")
}

#[test]
fn gets_of_a_sparse_memo_key_do_not_grow_the_stack() {
    // [1] * 100_000, the 1 stored at a memo key far past the dense memo, then fetched
    // 100,000 times with LONG_BINGET (the sparse path of the get-run fast path).
    let mut b = vec![0x80, 2, b']', b'K', 1, b'r'];
    b.extend_from_slice(&0x0010_0000u32.to_le_bytes());
    b.extend_from_slice(b"0(");
    for _ in 0..100_000 {
        b.push(b'j');
        b.extend_from_slice(&0x0010_0000u32.to_le_bytes());
    }
    b.extend_from_slice(b"e.");
    let n = on_small_stack(move || {
        let p = read_pickle_bytes(&b).unwrap();
        let items = p.seq(p.root()).unwrap();
        assert!(items.iter().all(|&h| p.int(h) == Some(1)));
        items.len()
    });
    assert_eq!(n, 100_000);
}

#[test]
fn a_trace_that_repeats_one_entry_a_million_times_reads_on_a_small_stack() {
    // {'segments': [], 'device_traces': [[E, E, …]]}, E = one memoized trace entry.
    let mut b = vec![0x80, 2, b'}', b'('];
    let s = |b: &mut Vec<u8>, t: &str| {
        b.push(b'X');
        b.extend_from_slice(&(t.len() as u32).to_le_bytes());
        b.extend_from_slice(t.as_bytes());
    };
    s(&mut b, "segments");
    b.push(b']');
    s(&mut b, "device_traces");
    b.extend_from_slice(b"]]("); // outer list, device 0's list, MARK
    b.extend_from_slice(b"}(");
    for (k, v) in [("action", "alloc"), ("stream", ""), ("frames", "")] {
        s(&mut b, k);
        if k == "frames" {
            b.push(b']');
        } else if k == "stream" {
            b.extend_from_slice(b"K\x00");
        } else {
            s(&mut b, v);
        }
    }
    for (k, v) in [("addr", 1u32 << 20), ("size", 512)] {
        s(&mut b, k);
        b.push(b'J');
        b.extend_from_slice(&v.to_le_bytes());
    }
    b.push(b'u');
    b.push(b'r');
    b.extend_from_slice(&7u32.to_le_bytes());
    for _ in 1..1_000_000 {
        b.push(b'j');
        b.extend_from_slice(&7u32.to_le_bytes());
    }
    b.extend_from_slice(b"ea"); // APPENDS to device 0's list, APPEND it to the outer one
    b.extend_from_slice(b"u."); // SETITEMS
    let n = on_small_stack(move || {
        let p = read_pickle_bytes(&b).unwrap();
        let snap = fragprobe_shared::torch::snapshot::decode(&p);
        let traces = p.seq(p.get(p.root(), "device_traces").unwrap()).unwrap();
        let n = p.seq(traces[0]).unwrap().len();
        (n, snap.map(|s| s.event_count()).unwrap_or(0))
    });
    assert_eq!(n.0, 1_000_000);
    assert_eq!(n.1, 1_000_000);
}

#[test]
fn protocol_0_reads_integers_past_128_bits_as_protocol_2_does() {
    // pickle.dumps(2**200, protocol=0) and protocol=2; and -(2**130) both ways.
    let p0 = format!("L{}L\n.", 1u128 << 100); // fits: 2**100
    let p = read_pickle_bytes(p0.as_bytes()).unwrap();
    assert_eq!(p.int(p.root()), Some(1i128 << 100));
    let big = "1606938044258990275541962092341162602522202993782792835301376"; // 2**200
    let p0 = read_pickle_bytes(format!("L{big}L\n.").as_bytes()).unwrap();
    let mut b2 = vec![0x80, 2, 0x8a, 26];
    let mut le = vec![0u8; 26];
    le[25] = 1; // 2**200 = 1 << (25 * 8)
    b2.extend_from_slice(&le);
    b2.push(b'.');
    let p2 = read_pickle_bytes(&b2).unwrap();
    match (p0.view(p0.root()), p2.view(p2.root())) {
        (Val::BigInt(a), Val::BigInt(b)) => assert_eq!(a, b),
        other => panic!("{other:?}"),
    }
    let neg = "-1361129467683753853853498429727072845824"; // -(2**130)
    let p = read_pickle_bytes(format!("I{neg}\n.").as_bytes()).unwrap();
    match p.view(p.root()) {
        Val::BigInt(b) => {
            assert!(b.is_negative());
            let mut want = [0u8; 17];
            want[16] = 0xfc; // -(2**130) = 0xfc << 128, two's complement
            assert_eq!(&*b.le_bytes, &want[..]);
        }
        other => panic!("{other:?}"),
    }
    // Python's limit on digits, with both numbers in the message.
    let long = "9".repeat(5000);
    let e = read_pickle_bytes(format!("L{long}L\n.").as_bytes())
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("5000 digits") && e.contains("4300"), "{e}");
}
