//! The runtime's files form no loop of references: no file of `src/` refers, directly or
//! through others, to a file that refers back to it. A file refers to another through a path
//! into it (`crate::wait::lock`, `super::error::KernelError`, `child::f` for a child module)
//! or to an item the crate root re-exports from it (`crate::Tensor` is `tensor.rs`). Comments
//! and string literals are not references; test modules are.
//!
//! This keeps the layers of the runtime apart: values, waiting and the rendezvous below the
//! executors, the executors below the session, so that each can be replaced (a device executor,
//! a remote rendezvous) without touching what sits beneath it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

/// Source files by path relative to `src/` (`kernels/mod.rs`), `/`-separated.
fn sources() -> BTreeMap<String, String> {
    fn walk(dir: &Path, root: &Path, out: &mut BTreeMap<String, String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, root, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(root).unwrap().components();
                let rel: Vec<String> = rel.map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
                out.insert(rel.join("/"), std::fs::read_to_string(&path).unwrap());
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = BTreeMap::new();
    walk(&root, &root, &mut out);
    out
}

/// The source without comments, string literals and char literals (each left as a space).
fn code_only(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        let rest = &src[i..];
        if rest.starts_with("//") {
            i += rest.find('\n').unwrap_or(rest.len());
        } else if rest.starts_with("/*") {
            i += rest.find("*/").map_or(rest.len(), |e| e + 2);
        } else if let Some(hashes) = raw_string_start(rest) {
            let close = format!("\"{}", "#".repeat(hashes));
            let body = &rest[hashes + 2..];
            i += hashes + 2 + body.find(&close).map_or(body.len(), |e| e + close.len());
            out.push(' ');
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push(' ');
        } else if b[i] == b'\'' && (rest[1..].starts_with('\\') || rest[1..].chars().nth(1) == Some('\'')) {
            // A char literal ('x', '\n', '\''); a lifetime ('a) has no closing quote.
            let end = if rest[1..].starts_with('\\') { rest[3..].find('\'').map_or(rest.len(), |e| e + 4) } else { 3 };
            i += end.min(rest.len());
            out.push(' ');
        } else {
            let c = rest.chars().next().unwrap();
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// `r"`, `r#"`, ... at the start of `s` (not inside an identifier): the number of `#`s.
fn raw_string_start(s: &str) -> Option<usize> {
    let t = s.strip_prefix('r').or_else(|| s.strip_prefix("br"))?;
    let hashes = t.len() - t.trim_start_matches('#').len();
    t[hashes..].starts_with('"').then_some(hashes)
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Every path that starts with `crate` or `super`, as its segments (`["crate", "wait",
/// "lock"]`), with `use` groups expanded (`crate::{a, b::c}` gives `crate::a` and
/// `crate::b::c`), and every path starting with one of `children`.
fn paths(code: &str, children: &BTreeSet<String>) -> Vec<Vec<String>> {
    let chars: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if is_ident(chars[i]) && (i == 0 || !is_ident(chars[i - 1]) && chars[i - 1] != ':') {
            let (segs, end) = path_at(&chars, i);
            if (segs.len() > 1 || chars.get(end) == Some(&'{'))
                && (segs[0] == "crate" || segs[0] == "super" || children.contains(&segs[0]))
            {
                expand(&chars, end, segs, &mut out);
            }
            i = end.max(i + 1);
        } else {
            i += 1;
        }
    }
    out
}

/// The `a::b::c` at `i`, and where it ends (after a trailing `::` when a group follows).
fn path_at(chars: &[char], mut i: usize) -> (Vec<String>, usize) {
    let mut segs = Vec::new();
    loop {
        let start = i;
        while i < chars.len() && is_ident(chars[i]) {
            i += 1;
        }
        segs.push(chars[start..i].iter().collect::<String>());
        let mut j = i;
        while j < chars.len() && chars[j].is_whitespace() {
            j += 1;
        }
        if chars.get(j) == Some(&':') && chars.get(j + 1) == Some(&':') {
            j += 2;
            while j < chars.len() && chars[j].is_whitespace() {
                j += 1;
            }
            if chars.get(j).is_some_and(|&c| is_ident(c)) {
                i = j;
                continue;
            }
            return (segs, j);
        }
        return (segs, i);
    }
}

/// Pushes `prefix`, or when a `{...}` group follows at `at`, `prefix` joined with each of
/// its items (recursively).
fn expand(chars: &[char], at: usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    if chars.get(at) != Some(&'{') {
        out.push(prefix);
        return;
    }
    let mut depth = 0;
    let mut item_start = at + 1;
    for j in at..chars.len() {
        match chars[j] {
            '{' => depth += 1,
            '}' | ',' if depth == 1 => {
                let item: String = chars[item_start..j].iter().collect();
                let item = item.trim();
                if !item.is_empty() && item != "self" && item != "*" {
                    let start = item_start + (chars[item_start..j].iter().take_while(|c| c.is_whitespace()).count());
                    let (segs, end) = path_at(chars, start);
                    let mut p = prefix.clone();
                    p.extend(segs);
                    expand(chars, end, p, out);
                } else {
                    out.push(prefix.clone());
                }
                item_start = j + 1;
                if chars[j] == '}' {
                    return;
                }
            }
            '}' => depth -= 1,
            _ => {}
        }
    }
}

/// The file of a module path (`["kernels", "elem"]`), if it is one.
fn module_file(files: &BTreeMap<String, String>, module: &[String]) -> Option<String> {
    let base = module.join("/");
    [format!("{base}.rs"), format!("{base}/mod.rs")].into_iter().find(|f| files.contains_key(f))
}

/// The module path of a file: `kernels/mod.rs` is `["kernels"]`, `kernels/elem.rs`
/// `["kernels", "elem"]`.
fn module_of(file: &str) -> Vec<String> {
    let mut m: Vec<String> = file.trim_end_matches(".rs").split('/').map(String::from).collect();
    if m.last().is_some_and(|l| l == "mod") {
        m.pop();
    }
    m
}

/// Which file each item the crate root re-exports (`pub use tensor::Tensor;`) or exports as
/// a macro comes from.
fn root_items(files: &BTreeMap<String, String>) -> HashMap<String, String> {
    let mut items = HashMap::new();
    let lib = code_only(&files["lib.rs"]);
    let chars: Vec<char> = lib.chars().collect();
    for (at, _) in lib.match_indices("pub use ") {
        let start = lib[..at].chars().count() + "pub use ".len();
        let (segs, end) = path_at(&chars, start);
        let mut out = Vec::new();
        expand(&chars, end, segs, &mut out);
        for p in out {
            if let (Some(file), Some(item)) = (module_file(files, &p[..p.len() - 1]), p.last()) {
                items.insert(item.clone(), file);
            }
        }
    }
    for (file, src) in files {
        let code = code_only(src);
        for (at, _) in code.match_indices("#[macro_export]") {
            let rest = code[at..].split_once("macro_rules!").map(|x| x.1.trim_start()).unwrap_or("");
            let name: String = rest.chars().take_while(|&c| is_ident(c)).collect();
            items.insert(name, file.clone());
        }
    }
    items
}

/// The deepest file along `module` + `segs` (a path may go on into items of that file).
fn deepest_file(files: &BTreeMap<String, String>, module: &[String], segs: &[String]) -> Option<String> {
    let mut path = module.to_vec();
    let mut found = None;
    for s in segs {
        path.push(s.clone());
        match module_file(files, &path) {
            Some(f) => found = Some(f),
            None => break,
        }
    }
    found
}

/// For each file but the crate root, the files it refers to.
fn module_graph() -> BTreeMap<String, BTreeSet<String>> {
    let files = sources();
    let items = root_items(&files);
    let mut graph = BTreeMap::new();
    for (file, src) in &files {
        if file == "lib.rs" {
            continue;
        }
        let here = module_of(file);
        let parent = &here[..here.len() - 1];
        let code = code_only(src);
        let children: BTreeSet<String> = code
            .lines()
            .filter_map(|l| {
                let l = l.trim().trim_start_matches("pub(crate) ").trim_start_matches("pub ");
                l.strip_prefix("mod ")?.strip_suffix(';').map(|m| m.trim().to_string())
            })
            .collect();
        let mut refs = BTreeSet::new();
        for p in paths(&code, &children) {
            let target = match p[0].as_str() {
                "crate" => deepest_file(&files, &[], &p[1..]).or_else(|| items.get(&p[1]).cloned()),
                // `super` in a test module means this file; at the top of a file, its parent.
                "super" => deepest_file(&files, parent, &p[1..]).or_else(|| module_file(&files, parent)),
                _ => deepest_file(&files, &here, &p),
            };
            if let Some(t) = target.filter(|t| t != file && t != "lib.rs") {
                refs.insert(t);
            }
        }
        graph.insert(file.clone(), refs);
    }
    graph
}

/// A loop through `graph`, as the files along it, if there is one.
fn find_loop(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        f: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        marks: &mut HashMap<String, Mark>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match marks.get(f) {
            Some(Mark::Done) => return None,
            Some(Mark::Open) => {
                let from = path.iter().position(|p| p == f).unwrap_or(0);
                let mut cycle = path[from..].to_vec();
                cycle.push(f.to_string());
                return Some(cycle);
            }
            None => {}
        }
        marks.insert(f.to_string(), Mark::Open);
        path.push(f.to_string());
        for next in graph.get(f).into_iter().flatten() {
            if let Some(c) = visit(next, graph, marks, path) {
                return Some(c);
            }
        }
        path.pop();
        marks.insert(f.to_string(), Mark::Done);
        None
    }
    let mut marks = HashMap::new();
    graph.keys().find_map(|f| visit(f, graph, &mut marks, &mut Vec::new()))
}

#[test]
fn no_file_of_the_runtime_refers_back_to_itself() {
    let graph = module_graph();
    let listing: Vec<String> =
        graph.iter().map(|(f, to)| format!("{f}: {}", to.iter().cloned().collect::<Vec<_>>().join(", "))).collect();
    println!("{}", listing.join("\n"));
    if let Some(cycle) = find_loop(&graph) {
        panic!("the runtime's files refer to each other in a loop: {}\n\n{}", cycle.join(" -> "), listing.join("\n"));
    }
}

/// The layers the seams are for: the rendezvous and the value type know nothing of the
/// interpreter or the session, and executors nothing of the session.
#[test]
fn the_layers_point_one_way() {
    let graph = module_graph();
    let below = |f: &str, not: &[&str]| {
        let mut seen = BTreeSet::new();
        let mut work = vec![f.to_string()];
        while let Some(x) = work.pop() {
            for y in graph.get(&x).into_iter().flatten() {
                if seen.insert(y.clone()) {
                    work.push(y.clone());
                }
            }
        }
        for n in not {
            assert!(!seen.contains(*n), "{f} reaches {n}: {seen:?}");
        }
    };
    below("value.rs", &["exec.rs", "session.rs", "rendezvous.rs"]);
    below("rendezvous.rs", &["exec.rs", "session.rs"]);
    below("executor.rs", &["exec.rs", "session.rs"]);
    below("exec.rs", &["session.rs"]);
}

#[test]
fn the_reader_finds_references() {
    let code = code_only("use crate::{a::b, c::{d, e}};\n// crate::f\nlet s = \"crate::g\";\nsuper::h::i(x);\n");
    let found = paths(&code, &BTreeSet::from(["k".to_string()]));
    let found: Vec<String> = found.iter().map(|p| p.join("::")).collect();
    assert_eq!(found, ["crate::a::b", "crate::c::d", "crate::c::e", "super::h::i"]);
    assert!(paths(&code_only("k::x(); 'a' ; '\\'' ; fn f<'a>() {}"), &BTreeSet::from(["k".to_string()]))
        .iter()
        .any(|p| p == &["k", "x"]));
}
