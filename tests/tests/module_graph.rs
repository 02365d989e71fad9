//! The modules of each crate's `src/` depend on one another in one direction only, so each
//! can be read, tested and changed knowing only the modules below it. The check scans the text for
//! `crate::`, `super::` and `self::` paths rather than asking the compiler, so it sees what a
//! reader sees; method calls on another module's types are not dependencies it can find.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

type Graph = BTreeMap<String, BTreeSet<String>>;

/// Module path (`parser::types`) to file text, for every file under `src/` but `lib.rs`.
fn sources(dir: &Path, prefix: &[String], out: &mut BTreeMap<String, String>) {
    let mut entries: Vec<_> = fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for path in entries {
        let name = path.file_stem().unwrap().to_str().unwrap().to_string();
        if path.is_dir() {
            let mut p = prefix.to_vec();
            p.push(name);
            sources(&path, &p, out);
        } else if path.extension().is_some_and(|e| e == "rs") && !(prefix.is_empty() && name == "lib") {
            let mut p = prefix.to_vec();
            if name != "mod" {
                p.push(name);
            }
            out.insert(p.join("::"), fs::read_to_string(&path).unwrap());
        }
    }
}

fn ident_end(s: &str) -> usize {
    s.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(s.len())
}

/// Every full path a `use` tree or path expression starting at `s` names, relative to `base`;
/// `{a::b, c}` groups expand to one path each.
fn paths(s: &str, base: Vec<String>, out: &mut Vec<Vec<String>>) {
    let mut path = base;
    let mut rest = s;
    loop {
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut start = 0;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        paths(group[start..i].trim(), path.clone(), out);
                        return;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        paths(group[start..i].trim(), path.clone(), out);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            return;
        }
        let n = ident_end(rest);
        if n == 0 {
            break;
        }
        path.push(rest[..n].to_string());
        match rest[n..].strip_prefix("::") {
            Some(r) => rest = r.trim_start(),
            None => break,
        }
    }
    out.push(path);
}

/// The modules each module refers to (itself excluded). A path to an item of the crate root is
/// an error: the root re-exports every module, so depending on it depends on them all.
fn module_graph(src: &Path) -> (Graph, Vec<String>) {
    let mut files = BTreeMap::new();
    sources(src, &[], &mut files);
    let known: BTreeSet<&str> = files.keys().map(String::as_str).collect();
    // `#[macro_export]` macros, which only the root can name.
    let macros: BTreeSet<String> = files
        .values()
        .flat_map(|t| t.split("#[macro_export]").skip(1))
        .filter_map(|after| after.split_once("macro_rules!").map(|(_, rest)| rest))
        .map(|rest| rest.trim_start()[..ident_end(rest.trim_start())].to_string())
        .collect();
    let mut graph = Graph::new();
    let mut errors = Vec::new();
    for (module, text) in &files {
        let own: Vec<String> = module.split("::").map(String::from).collect();
        let mut scope = own.clone();
        let mut found = Vec::new();
        for line in text.lines() {
            // Inline modules (`mod tests { ... }`): rustfmt puts their braces at column 0.
            if let Some(name) = line.strip_prefix("mod ").and_then(|l| l.strip_suffix(" {")) {
                scope.push(name.to_string());
            } else if line == "}" && scope.len() > own.len() {
                scope.pop();
            }
            let code = line.split("//").next().unwrap_or("");
            for (at, _) in code.match_indices("::") {
                let head_start =
                    code[..at].rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).map_or(0, |i| i + 1);
                let mut base = match &code[head_start..at] {
                    "crate" => Vec::new(),
                    "self" => scope.clone(),
                    "super" => scope[..scope.len().saturating_sub(1)].to_vec(),
                    _ => continue,
                };
                // `super::super::x` is handled here whole; skip its inner `::`s.
                if head_start >= 2 && &code[head_start - 2..head_start] == "::" {
                    continue;
                }
                let mut rest = &code[at + 2..];
                while let Some(r) = rest.strip_prefix("super::") {
                    base.pop();
                    rest = r;
                }
                paths(rest.trim_start(), base, &mut found);
            }
        }
        let edges = graph.entry(module.clone()).or_default();
        for path in found {
            let target = (0..=path.len()).rev().map(|n| path[..n].join("::")).find(|p| known.contains(p.as_str()));
            match target {
                Some(t) if t != *module => {
                    edges.insert(t);
                }
                Some(_) => {}
                // Exported macros live at the root whatever module defines them.
                None if path.len() == 1 && macros.contains(&path[0]) => {}
                None => errors.push(format!("{module} refers to crate::{}: name the module it is in", path.join("::"))),
            }
        }
    }
    (graph, errors)
}

fn reachable(graph: &Graph, from: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut stack = vec![from.to_string()];
    while let Some(m) = stack.pop() {
        for next in graph.get(&m).into_iter().flatten() {
            if seen.insert(next.clone()) {
                stack.push(next.clone());
            }
        }
    }
    seen
}

/// Every crate of the workspace, with a module its scan must find (so a moved directory
/// cannot make the check pass vacuously).
const CRATES: [(&str, &str); 10] = [
    ("ir-spec", "ops"),
    ("plan", "print"),
    ("runtime", "session"),
    ("cpu-runtime", "entry"),
    ("aot", "program"),
    ("cuda-runtime", "device"),
    ("devices", "cluster"),
    ("onnx", "proto"),
    ("dist", "service"),
    ("compiler", "driver"),
];

#[test]
fn module_imports_have_no_cycles() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut problems = Vec::new();
    for (krate, some_module) in CRATES {
        let src = root.join(krate).join("src");
        let (graph, errors) = module_graph(&src);
        println!("{krate}:");
        for (m, to) in &graph {
            println!("  {m} -> {}", to.iter().cloned().collect::<Vec<_>>().join(", "));
        }
        assert!(graph.contains_key(some_module), "the scan found no module {some_module} in {src:?}");
        problems.extend(errors.into_iter().map(|e| format!("{krate}: {e}")));
        let reach: BTreeMap<&String, BTreeSet<String>> = graph.keys().map(|m| (m, reachable(&graph, m))).collect();
        let mut cycles = BTreeSet::new();
        for (m, r) in &reach {
            if r.contains(*m) {
                let members: BTreeSet<&String> =
                    reach.iter().filter(|(n, rn)| r.contains(**n) && rn.contains(*m)).map(|(n, _)| *n).collect();
                let edges: Vec<String> = members
                    .iter()
                    .flat_map(|a| graph[*a].iter().filter(|b| members.contains(b)).map(move |b| format!("{a} -> {b}")))
                    .collect();
                cycles.insert(edges.join(", "));
            }
        }
        problems.extend(
            cycles
                .into_iter()
                .map(|c| format!("{krate}: modules that import each other, directly or round a loop: {c}")),
        );
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_scan_sees_every_form_of_path() {
    let mut found = Vec::new();
    paths("a::{b::C, d, e::{f, g}}", vec!["x".into()], &mut found);
    let found: Vec<String> = found.iter().map(|p| p.join("::")).collect();
    assert_eq!(found, ["x::a::b::C", "x::a::d", "x::a::e::f", "x::a::e::g"]);
}
