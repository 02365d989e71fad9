//! Weights out of the IR text and back: every tensor literal of more than [`MIN_ELEMENTS`]
//! distinct elements (a constant's value, a variable's `init`), and every literal of a weights
//! file beside the module (the program has no such file), leaves the text as a splat of
//! its first element and goes into a safetensors blob under the key `G/N/ATTR` (graph index,
//! node index in the graph's arena, attribute). The program parses the text, which numbers its
//! nodes as the compiler's copy did, and puts each literal back before anything runs. So the
//! object holds weights as bytes, read-only and parsed by nobody, and `--weights-file` can
//! move them to a file of their own.

use graphc_ir::{Attr, Module, Node, TensorLiteral};
use graphc_runtime::checkpoint::{decode, encode};
use graphc_runtime::Tensor;
use std::sync::Arc;

/// Literals this small stay in the text.
pub const MIN_ELEMENTS: usize = 16;

/// Takes the large literals out of `m` (which must be as the parser made it: nodes numbered
/// in text order), leaving splats in their place; returns them as a safetensors blob, and
/// their keys.
pub fn strip(m: &mut Module) -> Result<(Vec<u8>, Vec<String>), String> {
    let mut taken = Vec::new();
    for (gi, g) in m.graphs.iter_mut().enumerate() {
        for (node, data) in g.nodes.iter_mut() {
            let names: Vec<String> = data
                .attrs
                .iter()
                // Every literal of a weights file too: the program has no file beside it.
                .filter(|(_, a)| matches!(a, Attr::Tensor(l) if l.len() > MIN_ELEMENTS || l.stored_in().is_some()))
                .map(|(n, _)| n.to_string())
                .collect();
            for name in names {
                let Some(Attr::Tensor(lit)) = data.attrs.get(&name).cloned() else { continue };
                let t = Tensor::from_literal(&lit).map_err(|e| format!("@{} attribute {name}: {e}", g.name))?;
                let splat = TensorLiteral::new(lit.ty().clone(), lit.head()?)?;
                data.attrs.set(name.clone(), Attr::Tensor(splat));
                taken.push((format!("{gi}/{}/{name}", node.as_u32()), Some(Arc::new(t))));
            }
        }
    }
    let keys = taken.iter().map(|(k, _)| k.clone()).collect();
    Ok((encode(&taken, None).map_err(|e| e.message)?, keys))
}

/// Puts the literals of `blob` back into `m` (parsed from the stripped text); an error unless
/// the blob holds exactly the literals `keys` names, each of the splat's type.
pub fn restore(m: &mut Module, blob: &[u8], keys: &[String]) -> Result<(), String> {
    let loaded = decode(blob).map_err(|e| format!("the weights are not valid: {}", e.message))?;
    if let Some(k) = keys.iter().find(|k| !loaded.values.contains_key(*k)) {
        // A file with none of them is another kind of file: a checkpoint names variables.
        let hint = if keys.iter().all(|k| !loaded.values.contains_key(k)) {
            " (it holds none of the program's weights; a checkpoint of variables is given with --restore)"
        } else {
            ""
        };
        return Err(format!("the weights lack \"{k}\", which the program was compiled with{hint}"));
    }
    for (key, t) in loaded.values {
        let bad = || format!("the weights hold \"{key}\", which the module has no literal for");
        if !keys.contains(&key) {
            return Err(bad());
        }
        let mut parts = key.splitn(3, '/');
        let (Some(gi), Some(node), Some(attr)) = (parts.next(), parts.next(), parts.next()) else { return Err(bad()) };
        let gi: usize = gi.parse().map_err(|_| bad())?;
        let node: u32 = node.parse().map_err(|_| bad())?;
        let g = m.graphs.get_mut(gi).ok_or_else(bad)?;
        let node = Node::from_u32(node);
        if !g.nodes.is_valid(node) {
            return Err(bad());
        }
        let data = &mut g.nodes[node];
        let Some(Attr::Tensor(old)) = data.attrs.get(attr) else { return Err(bad()) };
        if *old.ty() != t.ty() {
            return Err(format!("the weights hold \"{key}\" as {} where the module has {}", t.ty(), old.ty()));
        }
        data.attrs.set(attr, Attr::Tensor(t.to_literal()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use graphc_ir::{equiv::modules_equal, parse_module, print_module};

    const TEXT: &str = r#"
graph @g(%x: f32[2,9]) -> (y: f32[2,9], n: i64[17]) {
  %c = constant {value = dense<[[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0], [9.0, 8.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0]]> : f32[2,9]} : f32[2,9]
  %s = constant {value = dense<[1.0, 2.0]> : f32[2]} : f32[2]
  %v = variable {name = "v", init = dense<[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17]> : i64[17]} : var<i64[17]>
  %n = read %v : i64[17]
  %y = add %x, %c : f32[2,9]
  return %y, %n
}
"#;

    #[test]
    fn large_literals_leave_the_text_and_come_back() {
        let original = parse_module(TEXT).unwrap();
        let mut m = parse_module(&print_module(&original)).unwrap();
        let (blob, keys) = strip(&mut m).unwrap();
        assert_eq!(keys.len(), 2);
        let text = print_module(&m);
        assert!(!text.contains("9.0, 8.0") && !text.contains("16, 17"), "{text}");
        assert!(text.contains("dense<[1.0, 2.0]>"), "small literals stay: {text}");
        let mut back = parse_module(&text).unwrap();
        restore(&mut back, &blob, &keys).unwrap();
        modules_equal(&back, &original).unwrap();
        let e = restore(&mut parse_module(&text).unwrap(), &blob, &[keys[0].clone(), "0/99/value".into()]).unwrap_err();
        assert!(e.contains("lack \"0/99/value\""), "{e}");
    }

    #[test]
    fn weights_that_do_not_fit_the_module_are_errors() {
        let mut m = parse_module(TEXT).unwrap();
        let (blob, keys) = strip(&mut m).unwrap();
        let mut other = parse_module("graph @g(%x: f32[2]) -> (y: f32[2]) {\n  return %x\n}\n").unwrap();
        let e = restore(&mut other, &blob, &keys).unwrap_err();
        assert!(e.contains("has no literal for"), "{e}");
        assert!(restore(&mut m, b"not safetensors", &keys).unwrap_err().contains("not valid"));
    }
}
