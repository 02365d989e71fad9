//! A module's weights in a file beside its text: which literals go there when a module is
//! written ([`Stored`]: the large ones, under names from the IR), putting every literal back in
//! the text ([`into_text`]), and the weights files a `.gir` names ([`files_named_in`]).

use crate::attr::{Attr, TensorLiteral};
use crate::graph::{Module, Node};
use crate::lexer::{lex, Tok};
use crate::types::TensorType;
use crate::weights_file::{self, External, WeightsFile};
use std::collections::{HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};

/// Literals of more elements than this go to the weights file when a module is written beside
/// one (`graphc import`, `graphc opt -o`); splats and smaller literals stay in the text. 1024
/// elements are about 10 KiB of text as f32s, 4 KiB as bytes.
pub const STORED_ABOVE: usize = 1024;

/// The directory of a `.gir` file, which its weights files are named relative to.
pub fn module_dir(path: &Path) -> &Path {
    path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."))
}

/// The directory `m`'s weights files are named from (the `.gir`'s it was parsed from), for
/// printing and parsing it again; `.` when it names none.
pub fn dir_of(m: &Module) -> PathBuf {
    let first = literals(m, |l| l.stored_in().is_some()).into_iter().next();
    first
        .and_then(|at| {
            let e = get(m, &at).stored_in()?;
            e.file().ancestors().nth(e.path().split('/').count()).map(Path::to_path_buf)
        })
        .unwrap_or_else(|| PathBuf::from("."))
}

/// The weights file written beside `out`: its name with `.gir` replaced by (or, without it,
/// followed by) `.weights.safetensors`.
pub fn weights_path(out: &Path) -> PathBuf {
    let name = out.file_name().unwrap_or_default().to_string_lossy();
    let stem = name.strip_suffix(".gir").filter(|s| !s.is_empty()).unwrap_or(&name);
    out.with_file_name(format!("{stem}.weights.safetensors"))
}

/// Every literal of the module in the text: those in weights files read into it.
pub fn into_text(m: &mut Module) -> Result<(), String> {
    for at in literals(m, |l| l.stored_in().is_some()) {
        let text = get(m, &at).in_text()?;
        set(m, &at, text);
    }
    Ok(())
}

/// Where a literal is: graph index, node, attribute.
type At = (usize, Node, String);

/// Where the live literals for which `pick` holds are, in text order.
fn literals(m: &Module, pick: impl Fn(&TensorLiteral) -> bool) -> Vec<At> {
    let mut out = Vec::new();
    for (gi, g) in m.graphs.iter().enumerate() {
        for n in g.walk() {
            for (name, a) in g.nodes[n].attrs.iter() {
                if matches!(a, Attr::Tensor(lit) if pick(lit)) {
                    out.push((gi, n, name.to_string()));
                }
            }
        }
    }
    out
}

fn get<'m>(m: &'m Module, (gi, n, name): &At) -> &'m TensorLiteral {
    m.graphs[*gi].nodes[*n].attrs.tensor(name).expect("a literal found by `literals`")
}

fn set(m: &mut Module, (gi, n, name): &At, lit: TensorLiteral) {
    m.graphs[*gi].nodes[*n].attrs.set(name.clone(), Attr::Tensor(lit));
}

/// The literals of a module that go to its weights file, each under its name there: a
/// variable's `init` under the variable's name, a constant's value under its result's name
/// (or `GRAPH/N`, the node's number, for an unnamed one); a name taken already gets `#2`,
/// `#3`, ...; references to one tensor of one file are stored once.
#[derive(Debug)]
pub struct Stored {
    /// Name in the file and type, in the file's order.
    tensors: Vec<(String, TensorType)>,
    /// Each literal taken: where, and its tensor's index in `tensors`.
    taken: Vec<(At, usize)>,
}

impl Stored {
    /// Plans the weights file of `m`: its literals of more than [`STORED_ABOVE`] elements.
    pub fn plan(m: &Module) -> Stored {
        let mut stored = Stored { tensors: Vec::new(), taken: Vec::new() };
        let mut names: HashMap<String, usize> = HashMap::new();
        let mut same: HashMap<External, usize> = HashMap::new();
        for at in literals(m, |l| l.len() > STORED_ABOVE) {
            let lit = get(m, &at);
            if let Some(&i) = lit.stored_in().and_then(|e| same.get(e)) {
                stored.taken.push((at, i));
                continue;
            }
            let g = &m.graphs[at.0];
            let nd = &g.nodes[at.1];
            let base = match (nd.attrs.str("name"), nd.results.first().and_then(|&v| g.values[v].name.as_ref())) {
                (Some(var), _) if at.2 == "init" => var.to_string(),
                (_, Some(value)) => value.clone(),
                _ => format!("{}/{}", g.name, at.1.as_u32()),
            };
            let mut name = base.clone();
            let mut k = 1;
            while names.contains_key(&name) || name == "__metadata__" {
                k += 1;
                name = format!("{base}#{k}");
            }
            let i = stored.tensors.len();
            names.insert(name.clone(), i);
            if let Some(e) = lit.stored_in() {
                same.insert(e.clone(), i);
            }
            stored.tensors.push((name, lit.ty().clone()));
            stored.taken.push((at, i));
        }
        stored
    }

    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }

    /// The tensors' names in the file, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tensors.iter().map(|(n, _)| n.as_str())
    }

    /// Writes the safetensors file of `m`'s literals (one tensor's elements in memory at a
    /// time, besides the module's own).
    pub fn write(&self, m: &Module, out: &mut impl io::Write) -> io::Result<()> {
        // The first literal of each tensor gives its elements.
        let mut first = vec![0; self.tensors.len()];
        for (k, (_, i)) in self.taken.iter().enumerate().rev() {
            first[*i] = k;
        }
        let tensors: Vec<(&str, &TensorType)> = self.tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
        weights_file::write(out, &tensors, |i| get(m, &self.taken[first[i]].0).elements())
    }

    /// Makes the literals taken references to their tensors in the file written, `written`
    /// as the text names it in `dir`; the file is opened and its header checked as a parse
    /// would. The other literals in weights files are put in the text.
    pub fn refer(self, m: &mut Module, dir: &Path, written: &str) -> Result<(), String> {
        let file = WeightsFile::open(dir, written).map_err(|e| format!("weights file {written:?} {e}"))?;
        let taken: HashSet<&At> = self.taken.iter().map(|(at, _)| at).collect();
        for at in literals(m, |l| l.stored_in().is_some()) {
            if !taken.contains(&at) {
                let text = get(m, &at).in_text()?;
                set(m, &at, text);
            }
        }
        for (at, i) in self.taken {
            let (name, ty) = &self.tensors[i];
            let tensor = file.tensor(name).ok_or_else(|| format!("weights file {written:?} lost tensor {name:?}"))?;
            set(m, &at, TensorLiteral::stored(ty.clone(), tensor)?);
        }
        Ok(())
    }
}

/// The weights files a `.gir` file names, resolved against its directory (for the check that
/// no output replaces a file a command reads): the paths of `safetensors<"PATH", ...>`, also
/// when the reference is split over a few lines. Nothing for a file that is not a regular
/// file or cannot be read, or a path the parser refuses.
pub fn files_named_in(path: &Path) -> Vec<PathBuf> {
    use std::io::BufRead;
    use std::os::unix::fs::OpenOptionsExt;
    /// Lines a reference cut at a line's end is looked for in (blank and comment lines).
    const JOINED: usize = 8;
    let opened = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path);
    let Ok(f) = opened.and_then(|f| if f.metadata()?.is_file() { Ok(f) } else { Err(io::ErrorKind::Other.into()) })
    else {
        return Vec::new();
    };
    let dir = module_dir(path);
    let mut files: Vec<PathBuf> = Vec::new();
    // Line by line, lexing only the lines that mention the word: a large literal's line is
    // read and passed over. A line that ends inside a reference is lexed again with the next.
    let mut reader = io::BufReader::new(f);
    let mut line = Vec::new();
    let (mut carried, mut joined) = (Vec::new(), 0);
    while reader.read_until(b'\n', &mut line).is_ok_and(|n| n > 0) {
        if carried.is_empty() && !line.windows(11).any(|w| w == b"safetensors") {
            line.clear();
            continue;
        }
        let mut text = std::mem::take(&mut carried);
        text.append(&mut line);
        let (toks, _) = lex(&String::from_utf8_lossy(&text), &mut Vec::new());
        for w in toks.windows(3) {
            if let [a, b, c] = w {
                if let (Tok::Ident(kw), Tok::Less, Tok::Str(p)) = (&a.tok, &b.tok, &c.tok) {
                    let file = dir.join(p);
                    if kw == "safetensors" && weights_file::check_path(p).is_ok() && !files.contains(&file) {
                        files.push(file);
                    }
                }
            }
        }
        let body = toks.iter().map(|t| &t.tok).filter(|t| !matches!(t, Tok::Eof)).collect::<Vec<_>>();
        let cut = match body.as_slice() {
            [.., Tok::Ident(kw)] | [.., Tok::Ident(kw), Tok::Less] => kw == "safetensors",
            _ => false,
        };
        if cut && joined < JOINED {
            carried = text;
            joined += 1;
        } else {
            joined = 0;
        }
    }
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_named_in_finds_references_split_over_lines() {
        let dir = std::env::temp_dir().join(format!("graphc-named-in-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let gir = dir.join("m.gir");
        let text = "graph @g() -> (a: f32[2048], b: f32[2048], c: f32[2048]) {\n  %a = constant {value = safetensors<\"one.safetensors\", \"a\"> : f32[2048]} : f32[2048]\n  %b = constant {value = safetensors\n    // a comment\n\n    <\"two.safetensors\", \"b\"> : f32[2048]} : f32[2048]\n  %c = constant {value = safetensors<\n\"three.safetensors\", \"c\"> : f32[2048]} : f32[2048]\n  return %a, %b, %c\n}\n";
        std::fs::write(&gir, text).unwrap();
        let found = files_named_in(&gir);
        let names: Vec<_> = found.iter().map(|p| p.file_name().unwrap().to_str().unwrap()).collect();
        assert_eq!(names, ["one.safetensors", "two.safetensors", "three.safetensors"]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn weights_paths() {
        assert_eq!(weights_path(Path::new("out/m.gir")), Path::new("out/m.weights.safetensors"));
        assert_eq!(weights_path(Path::new("m")), Path::new("m.weights.safetensors"));
        assert_eq!(weights_path(Path::new("a/m.txt")), Path::new("a/m.txt.weights.safetensors"));
        assert_eq!(weights_path(Path::new(".gir")), Path::new(".gir.weights.safetensors"));
        assert_eq!(module_dir(Path::new("m.gir")), Path::new("."));
        assert_eq!(module_dir(Path::new("a/b/m.gir")), Path::new("a/b"));
    }
}
