//! Literals in weights files (SPEC section 6): parsed lazily against the `.gir`'s directory,
//! printed as references, equal by the tensor they name or by their elements, written beside
//! a module by `weights::Stored`; and every bad path, file, header, name and type is a located
//! error, never a panic.

use graphc_ir::equiv::modules_equal;
use graphc_ir::weights::{self, Stored};
use graphc_ir::{
    parse_module_in, print_module, Attr, DType, Diagnostic, Module, SourceFile, TensorData, TensorLiteral, TensorType,
};
use std::borrow::Cow;
use std::path::{Path, PathBuf};

fn tmpdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("graphc-weights-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A safetensors file of `tensors` at `path`, written as graphc writes them.
fn write_st(path: &Path, tensors: &[(&str, TensorType, TensorData)]) {
    let names: Vec<(&str, &TensorType)> = tensors.iter().map(|(n, t, _)| (*n, t)).collect();
    let mut bytes = Vec::new();
    graphc_ir::weights_file::write(&mut bytes, &names, |i| Ok(Cow::Borrowed(&tensors[i].2))).unwrap();
    std::fs::write(path, bytes).unwrap();
}

/// A safetensors file of a header's JSON text and data bytes, as given (well formed or not).
fn raw_st(path: &Path, header: &str, data: &[u8]) {
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(data);
    std::fs::write(path, bytes).unwrap();
}

fn ramp(n: usize) -> Vec<f32> {
    (0..n).map(|i| i as f32 * 0.25 - 3.0).collect()
}

/// A graph returning constant `lit` of type `ty`.
fn graph_of(lit: &str, ty: &str) -> String {
    format!("graph @g() -> (y: {ty}) {{\n  %y = constant {{value = {lit}}} : {ty}\n  return %y\n}}\n")
}

fn parse(dir: &Path, text: &str) -> Result<Module, Vec<Diagnostic>> {
    parse_module_in(text, dir)
}

/// The one error parsing `text` in `dir` gives, rendered (`FILE:LINE:COL: error: ...`).
fn one_error(dir: &Path, text: &str) -> String {
    let diags = parse(dir, text).expect_err("the parse should fail");
    assert_eq!(diags.len(), 1, "{diags:?}");
    diags[0].render(&SourceFile::new("m.gir", text))
}

fn literal(m: &Module) -> &TensorLiteral {
    let g = &m.graphs[0];
    g.walk().iter().find_map(|&n| g.nodes[n].attrs.tensor("value")).expect("a constant")
}

#[test]
fn a_weights_files_tensor_parses_prints_and_reads() {
    let dir = tmpdir("basic");
    let w = ramp(6);
    write_st(&dir.join("w.safetensors"), &[("fc.w", TensorType::new(DType::F32, [2, 3]), TensorData::F32(w.clone()))]);
    let text = graph_of("safetensors<\"w.safetensors\", \"fc.w\"> : f32[2,3]", "f32[2,3]");
    let m = parse(&dir, &text).unwrap();
    // Canonical text round-trips, the reference as it is.
    assert_eq!(print_module(&m), text);
    let lit = literal(&m);
    assert!(lit.text_data().is_none() && !lit.is_splat() && lit.len() == 6);
    let e = lit.stored_in().unwrap();
    assert_eq!((e.path(), e.name()), ("w.safetensors", "fc.w"));
    assert_eq!(e.file(), dir.join("w.safetensors"));
    assert_eq!(*lit.elements().unwrap(), TensorData::F32(w.clone()));
    assert_eq!(lit.rows(1, 2).unwrap().text_data(), Some(&TensorData::F32(w[3..].to_vec())));
    assert_eq!(lit.head().unwrap(), TensorData::F32(vec![-3.0]));
    let inline = lit.in_text().unwrap();
    assert!(inline.stored_in().is_none());
    assert!(inline.to_string().starts_with("dense<[[-3.0, -2.75, -2.5]"));
    // Elsewhere, the same text names another file: paths are the .gir's directory's.
    let err = one_error(&tmpdir("elsewhere"), &text);
    assert!(err.contains("m.gir:2:38: error: weights file \"w.safetensors\" cannot be read"), "{err}");
    assert!(err.contains("No such file"), "{err}");
}

#[test]
fn every_dtype_reads_back_bit_for_bit() {
    let dir = tmpdir("dtypes");
    let data = [
        TensorData::F32(vec![f32::from_bits(0x7FC0_0001), -0.0, 1.5]),
        TensorData::F64(vec![f64::from_bits(0xFFF0_0000_0000_0001), 2.0, -1e300]),
        TensorData::F16(vec![graphc_ir::f16::from_bits(0x7E01), graphc_ir::f16::ONE, graphc_ir::f16::NEG_ZERO]),
        TensorData::BF16(vec![graphc_ir::bf16::from_bits(0xFFC1), graphc_ir::bf16::ONE, graphc_ir::bf16::MAX]),
        TensorData::I8(vec![-128, 0, 127]),
        TensorData::I16(vec![-32768, 1, 32767]),
        TensorData::I32(vec![i32::MIN, 7, i32::MAX]),
        TensorData::I64(vec![i64::MIN, -1, i64::MAX]),
        TensorData::U8(vec![0, 1, 255]),
        TensorData::U16(vec![0, 2, 65535]),
        TensorData::U32(vec![0, 3, u32::MAX]),
        TensorData::U64(vec![0, 4, u64::MAX]),
        TensorData::Bool(vec![true, false, true]),
    ];
    let tensors: Vec<(String, TensorType, TensorData)> =
        data.iter().map(|d| (d.dtype().to_string(), TensorType::new(d.dtype(), [3]), d.clone())).collect();
    let refs: Vec<(&str, TensorType, TensorData)> =
        tensors.iter().map(|(n, t, d)| (n.as_str(), t.clone(), d.clone())).collect();
    write_st(&dir.join("all.safetensors"), &refs);
    for d in &data {
        let ty = format!("{}[3]", d.dtype());
        let m = parse(&dir, &graph_of(&format!("safetensors<\"all.safetensors\", \"{}\"> : {ty}", d.dtype()), &ty))
            .unwrap_or_else(|e| panic!("{}: {e:?}", d.dtype()));
        assert_eq!(*literal(&m).elements().unwrap(), *d, "{}", d.dtype());
        // Equal to the literal of its elements in the text (bits compared: NaN payloads too).
        assert_eq!(*literal(&m), TensorLiteral::new(TensorType::new(d.dtype(), [3]), d.clone()).unwrap());
    }
}

#[test]
fn literals_are_equal_by_tensor_or_by_elements() {
    let dir = tmpdir("equal");
    let ty = TensorType::new(DType::F32, [4]);
    write_st(
        &dir.join("a.safetensors"),
        &[
            ("x", ty.clone(), TensorData::F32(vec![1.0, 2.0, 3.0, 4.0])),
            ("same", ty.clone(), TensorData::F32(vec![1.0, 2.0, 3.0, 4.0])),
            ("other", ty.clone(), TensorData::F32(vec![1.0, 2.0, 3.0, 5.0])),
            ("fives", ty.clone(), TensorData::F32(vec![5.0; 4])),
        ],
    );
    let get = |name: &str| {
        let m =
            parse(&dir, &graph_of(&format!("safetensors<\"a.safetensors\", \"{name}\"> : f32[4]"), "f32[4]")).unwrap();
        literal(&m).clone()
    };
    let (x, x2, same, other, fives) = (get("x"), get("x"), get("same"), get("other"), get("fives"));
    assert!(x.stored_in().unwrap().same_tensor(x2.stored_in().unwrap()), "two parses, one tensor");
    assert_eq!(x, x2);
    assert_eq!(x, same, "equal elements");
    assert_ne!(x, other);
    assert_eq!(x, TensorLiteral::new(ty.clone(), TensorData::F32(vec![1.0, 2.0, 3.0, 4.0])).unwrap());
    // A splat in the text equals a tensor of equal elements.
    assert_eq!(fives, TensorLiteral::new(ty.clone(), TensorData::F32(vec![5.0])).unwrap());
    assert_ne!(x, TensorLiteral::new(ty, TensorData::F32(vec![5.0])).unwrap());
}

#[test]
fn bad_paths_are_located_errors() {
    let dir = tmpdir("paths");
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    write_st(&dir.join("sub/w.safetensors"), &[("w", TensorType::new(DType::F32, [1]), TensorData::F32(vec![1.0]))]);
    // Below the directory is fine.
    parse(&dir, &graph_of("safetensors<\"sub/w.safetensors\", \"w\"> : f32[1]", "f32[1]")).unwrap();
    for (path, says) in [
        ("/etc/passwd", "is an absolute path"),
        ("../w.safetensors", "a '..' component, which leaves the directory"),
        ("sub/../sub/w.safetensors", "a '..' component"),
        ("./sub/w.safetensors", "a '.' component"),
        ("sub//w.safetensors", "an empty component"),
        ("sub/", "an empty component"),
        ("", "is an empty path"),
        ("sub\\\\w.safetensors", "a backslash"),
        ("sub", "is a directory, not a regular file"),
        ("missing.safetensors", "cannot be read"),
    ] {
        let text = graph_of(&format!("safetensors<\"{path}\", \"w\"> : f32[1]"), "f32[1]");
        let err = one_error(&dir, &text);
        assert!(err.contains("m.gir:2:38: error: weights file") && err.contains(says), "{path}: {err}");
    }
}

#[test]
fn a_fifo_is_refused_without_waiting_for_a_writer() {
    let dir = tmpdir("fifo");
    let fifo = dir.join("w.safetensors");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    if !made.is_ok_and(|s| s.success()) {
        return; // no mkfifo here: nothing to test
    }
    let err = one_error(&dir, &graph_of("safetensors<\"w.safetensors\", \"w\"> : f32[1]", "f32[1]"));
    assert!(err.contains("is a FIFO, not a regular file"), "{err}");
}

#[test]
fn malformed_files_are_located_errors() {
    let dir = tmpdir("malformed");
    let f32s = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let w = |at: &str| format!(r#""w":{{"dtype":"F32","shape":[2],"data_offsets":{at}}}"#);
    type Make = Box<dyn Fn(&Path)>;
    let cases: Vec<(&str, Make, &str)> = vec![
        ("empty", Box::new(|p| std::fs::write(p, b"").unwrap()), "0 bytes long, too short"),
        ("short", Box::new(|p| std::fs::write(p, [1u8, 0, 0]).unwrap()), "3 bytes long"),
        (
            "long header",
            Box::new(|p| std::fs::write(p, 1000u64.to_le_bytes()).unwrap()),
            "header length is 1000 bytes, but only 0 follow",
        ),
        (
            "huge header",
            Box::new(|p| std::fs::write(p, u64::MAX.to_le_bytes()).unwrap()),
            "more than the 100000000 graphc reads",
        ),
        ("not utf-8", Box::new(|p| raw_st(p, "{\u{0}", &[])), "not a safetensors header"),
        ("not json", Box::new(|p| raw_st(p, "{\"w\": [", &[])), "not a safetensors header"),
        ("not an object", Box::new(|p| raw_st(p, "[1, 2]", &[])), "a JSON object of tensors"),
        (
            "twice",
            Box::new(move |p| raw_st(p, &format!("{{{},{}}}", w("[0,8]"), w("[8,16]")), &f32s(&[1.0, 2.0, 3.0, 4.0]))),
            "it holds \"w\" twice",
        ),
        (
            "unknown dtype",
            Box::new(|p| raw_st(p, r#"{"w":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}}"#, &[0, 0])),
            "dtype \"F8_E4M3\", which graphc has no dtype for",
        ),
        (
            "missing field",
            Box::new(|p| raw_st(p, r#"{"w":{"dtype":"F32","shape":[2]}}"#, &[])),
            "tensor \"w\": missing field `data_offsets`",
        ),
        (
            "negative",
            Box::new(|p| raw_st(p, r#"{"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}}"#, &[0; 8])),
            "tensor \"w\"",
        ),
        (
            "wrong size",
            Box::new(move |p| raw_st(p, &format!("{{{}}}", w("[0,4]")), &[0; 4])),
            "takes 4 bytes of the data, but f32[2] takes 8",
        ),
        (
            "gap",
            Box::new(move |p| raw_st(p, &format!("{{{}}}", w("[4,12]")), &[0; 12])),
            "takes bytes 4..12 of the data, where bytes from 0 on were expected",
        ),
        (
            "overlap",
            Box::new(move |p| {
                let v = r#""v":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}"#;
                raw_st(p, &format!("{{{},{v}}}", w("[0,8]")), &[0; 12])
            }),
            "tensor \"v\" takes bytes 4..12 of the data, where bytes from 8 on were expected",
        ),
        (
            "truncated",
            Box::new(move |p| raw_st(p, &format!("{{{}}}", w("[0,8]")), &[0; 5])),
            "take 8 bytes of data, but the file holds 5 after the header (a truncated file?)",
        ),
        (
            "trailing",
            Box::new(move |p| raw_st(p, &format!("{{{}}}", w("[0,8]")), &[0; 9])),
            "bytes that no tensor takes",
        ),
    ];
    for (what, make, says) in cases {
        let path = dir.join(format!("{}.safetensors", what.replace(' ', "_")));
        make(&path);
        let text = graph_of(
            &format!("safetensors<\"{}\", \"w\"> : f32[2]", path.file_name().unwrap().to_str().unwrap()),
            "f32[2]",
        );
        let err = one_error(&dir, &text);
        assert!(err.contains("m.gir:2:38: error: weights file") && err.contains(says), "{what}: {err}");
    }
    // A well-formed file of the same layout parses (the cases above differ from it only in
    // what they break), with __metadata__ skipped.
    let path = dir.join("good.safetensors");
    raw_st(&path, &format!("{{\"__metadata__\":{{\"format\":\"pt\"}},{}}}", w("[0,8]")), &f32s(&[1.0, 2.0]));
    let m = parse(&dir, &graph_of("safetensors<\"good.safetensors\", \"w\"> : f32[2]", "f32[2]")).unwrap();
    assert_eq!(*literal(&m).elements().unwrap(), TensorData::F32(vec![1.0, 2.0]));
}

#[test]
fn names_and_types_are_checked_where_written() {
    let dir = tmpdir("names");
    write_st(
        &dir.join("w.safetensors"),
        &[
            ("fc.weight", TensorType::new(DType::F32, [2, 3]), TensorData::F32(ramp(6))),
            ("fc.bias", TensorType::new(DType::F32, [3]), TensorData::F32(ramp(3))),
        ],
    );
    let err = one_error(&dir, &graph_of("safetensors<\"w.safetensors\", \"fc.weigth\"> : f32[2,3]", "f32[2,3]"));
    assert!(err.contains("m.gir:2:55: error: weights file \"w.safetensors\" has no tensor \"fc.weigth\""), "{err}");
    assert!(err.contains("did you mean \"fc.weight\"?"), "{err}");
    let err = one_error(&dir, &graph_of("safetensors<\"w.safetensors\", \"zzz\"> : f32[2,3]", "f32[2,3]"));
    assert!(err.contains("help: the file holds fc.bias, fc.weight"), "{err}");
    for ty in ["f64[2,3]", "f32[3,2]", "f32[6]"] {
        let text = graph_of(&format!("safetensors<\"w.safetensors\", \"fc.weight\"> : {ty}"), ty);
        let err = one_error(&dir, &text);
        let col = text.lines().nth(1).unwrap().find("> : ").unwrap() + 5;
        let want = format!(
            "m.gir:2:{col}: error: tensor \"fc.weight\" of weights file \"w.safetensors\" is f32[2,3], but the literal's type is {ty}"
        );
        assert!(err.contains(&want), "{ty}: {err}");
    }
    // Malformed references: each a located syntax error.
    for (lit, says) in [
        ("safetensors<w.safetensors, \"w\">", "expected the weights file's path"),
        ("safetensors<\"w.safetensors\">", "expected ',' and the tensor's name"),
        ("safetensors<\"w.safetensors\", 3>", "expected the tensor's name"),
        ("safetensors<\"w.safetensors\", \"fc.bias\">", "expected ':' and the literal's type"),
    ] {
        let err = one_error(&dir, &graph_of(lit, "f32[3]"));
        assert!(err.contains(says), "{lit}: {err}");
    }
}

#[test]
fn a_file_named_many_times_is_opened_and_reported_once() {
    let dir = tmpdir("once");
    let text = "graph @g() -> (a: f32[1], b: f32[1]) {\n  %a = constant {value = safetensors<\"gone.safetensors\", \"a\"> : f32[1]} : f32[1]\n  %b = constant {value = safetensors<\"gone.safetensors\", \"b\"> : f32[1]} : f32[1]\n  return %a, %b\n}\n";
    let diags = parse(&dir, text).unwrap_err();
    assert_eq!(diags.len(), 1, "{diags:?}");
}

#[test]
fn elements_are_read_when_asked_and_a_file_changed_since_is_an_error() {
    let dir = tmpdir("changed");
    let path = dir.join("w.safetensors");
    write_st(&path, &[("w", TensorType::new(DType::Bool, [4]), TensorData::Bool(vec![true, false, true, true]))]);
    let m = parse(&dir, &graph_of("safetensors<\"w.safetensors\", \"w\"> : bool[4]", "bool[4]")).unwrap();
    let lit = literal(&m).clone();
    // Replaced by rename (as graphc writes files): the parse's file is still the one read.
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(dir.join("new"), b"not safetensors").unwrap();
    std::fs::rename(dir.join("new"), &path).unwrap();
    assert_eq!(*lit.elements().unwrap(), TensorData::Bool(vec![true, false, true, true]));
    // Changed in place: a BOOL that is not 0 or 1, then a truncated file.
    std::fs::write(&path, &bytes).unwrap();
    let m = parse(&dir, &graph_of("safetensors<\"w.safetensors\", \"w\"> : bool[4]", "bool[4]")).unwrap();
    let lit = literal(&m).clone();
    let mut bad = bytes.clone();
    *bad.last_mut().unwrap() = 7;
    std::fs::write(&path, &bad).unwrap();
    let err = lit.elements().unwrap_err();
    assert!(err.contains("holds the byte 7 at element 3, where a BOOL is 0 or 1"), "{err}");
    std::fs::write(&path, &bytes[..bytes.len() - 2]).unwrap();
    let err = lit.elements().unwrap_err();
    assert!(err.contains("the file is shorter than when it was opened"), "{err}");
    // Equality cannot read it: unequal, not a panic.
    assert_ne!(lit, TensorLiteral::new(TensorType::new(DType::Bool, [4]), TensorData::Bool(vec![true; 4])).unwrap());
}

/// A module with a large constant, a large variable init, a small constant and a splat.
fn mixed_module() -> Module {
    let big: Vec<String> = ramp(1025).iter().map(|x| format!("{x:?}")).collect();
    let init: Vec<String> = ramp(2000).iter().map(|x| format!("{:?}", x * 2.0)).collect();
    let text = format!(
        "graph @g(%x: f32[1025]) -> (y: f32[1025], v: f32[2000]) {{\n  \
         %w = constant {{value = dense<[{}]> : f32[1025]}} : f32[1025]\n  \
         %s = constant {{value = dense<[1.0, 2.0]> : f32[2]}} : f32[2]\n  \
         %z = constant {{value = dense<0.5> : f32[1025]}} : f32[1025]\n  \
         %h = variable {{name = \"v\", init = dense<[{}]> : f32[2000]}} : var<f32[2000]>\n  \
         %v = read %h : f32[2000]\n  \
         %a = add %x, %w : f32[1025]\n  \
         %y = add %a, %z : f32[1025]\n  \
         return %y, %v\n}}\n",
        big.join(", "),
        init.join(", ")
    );
    graphc_ir::parse_module(&text).unwrap()
}

/// What graphc does for `opt -o` and `import -o`: the planned literals written to the file,
/// then referred to.
fn store(m: &mut Module, dir: &Path, name: &str) -> Vec<String> {
    let stored = Stored::plan(m);
    let names = stored.names().map(String::from).collect();
    let mut bytes = Vec::new();
    stored.write(m, &mut bytes).unwrap();
    std::fs::write(dir.join(name), bytes).unwrap();
    stored.refer(m, dir, name).unwrap();
    names
}

#[test]
fn large_literals_go_to_the_weights_file_and_the_text_round_trips() {
    let dir = tmpdir("store");
    let original = mixed_module();
    let mut m = original.clone();
    assert_eq!(store(&mut m, &dir, "m.weights.safetensors"), ["w", "v"]);
    // Equal to what it was: references and literals in the text compared by elements.
    modules_equal(&m, &original).unwrap();
    let text = print_module(&m);
    assert!(
        text.contains("%w = constant {value = safetensors<\"m.weights.safetensors\", \"w\"> : f32[1025]}"),
        "{text}"
    );
    assert!(text.contains("init = safetensors<\"m.weights.safetensors\", \"v\"> : f32[2000]"), "{text}");
    assert!(text.contains("dense<[1.0, 2.0]> : f32[2]") && text.contains("dense<0.5> : f32[1025]"), "{text}");
    assert!(text.len() < 1000, "{} bytes", text.len());
    // The file holds the tensors' bytes and a header, no more.
    let size = std::fs::metadata(dir.join("m.weights.safetensors")).unwrap().len();
    assert!((3025 * 4..3025 * 4 + 300).contains(&size), "{size}");
    // Parsed back: the same module, printed the same.
    let back = parse(&dir, &text).unwrap();
    modules_equal(&back, &m).unwrap();
    modules_equal(&back, &original).unwrap();
    assert_eq!(print_module(&back), text);
    // Stored again elsewhere (opt -o of a module with weights): the new file holds them, read
    // from the old one, and nothing refers to the old file.
    let other = tmpdir("store-again");
    let mut again = back.clone();
    store(&mut again, &other, "n.weights.safetensors");
    let text2 = print_module(&again);
    assert!(!text2.contains("m.weights") && text2.contains("\"n.weights.safetensors\", \"w\""), "{text2}");
    modules_equal(&parse(&other, &text2).unwrap(), &original).unwrap();
    // Every literal back in the text: the original text.
    let mut inline = back;
    weights::into_text(&mut inline).unwrap();
    assert_eq!(print_module(&inline), print_module(&original));
}

#[test]
fn names_in_the_file_are_unique_and_one_tensor_is_stored_once() {
    let dir = tmpdir("names-unique");
    let big: Vec<String> = ramp(1100).iter().map(|x| format!("{x:?}")).collect();
    let lit = format!("dense<[{}]> : f32[1100]", big.join(", "));
    // Two graphs with a value %w each, and an unnamed one.
    let text = format!(
        "graph @a() -> (y: f32[1100]) {{\n  %w = constant {{value = {lit}}} : f32[1100]\n  return %w\n}}\n\n\
         graph @b() -> (y: f32[1100], z: f32[1100]) {{\n  %w = constant {{value = {lit}}} : f32[1100]\n  \
         %0 = constant {{value = {lit}}} : f32[1100]\n  return %w, %0\n}}\n"
    );
    let mut m = graphc_ir::parse_module(&text).unwrap();
    let names = store(&mut m, &dir, "w.safetensors");
    assert_eq!(names, ["w", "w#2", "b/1"]);
    let back = print_module(&m);
    // References to one tensor (as parsed back) are stored once.
    let mut m2 = parse(&dir, &back).unwrap();
    let dup = m2.graphs[0].nodes[m2.graphs[0].walk()[0]].attrs.get("value").unwrap().clone();
    let b = &mut m2.graphs[1];
    let n = b.walk()[1];
    b.nodes[n].attrs.set("value", dup);
    let other = tmpdir("names-unique-2");
    assert_eq!(store(&mut m2, &other, "w.safetensors"), ["w", "w#2"]);
    assert!(
        matches!(m2.graphs[1].nodes[n].attrs.get("value"), Some(Attr::Tensor(t)) if t.stored_in().unwrap().name() == "w")
    );
}
