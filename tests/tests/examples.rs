//! Every example is canonical, verifies, and round-trips; together they use every op and
//! every construct of the IR.

use graphc_ir::equiv::modules_equal;
use graphc_ir::{parse_module, print_module, verify_module, Op};
use graphc_tests::gir_files;
use std::collections::BTreeSet;

#[test]
fn examples_round_trip() {
    let files = gir_files("ir-spec/examples");
    assert!(files.len() >= 12, "only {} examples", files.len());
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let m = parse_module(&text).unwrap_or_else(|d| panic!("{}: {d:?}", path.display()));
        assert!(verify_module(&m).is_empty(), "{}", path.display());
        let printed = print_module(&m);
        assert_eq!(printed, text, "{} is not canonical", path.display());
        let again = parse_module(&printed).unwrap();
        modules_equal(&m, &again).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
}

#[test]
fn examples_cover_every_op_and_construct() {
    let mut ops = BTreeSet::new();
    let (mut devices, mut deps, mut multi_graph, mut named_state_shared) = (false, false, false, false);
    for path in gir_files("ir-spec/examples") {
        let m = parse_module(&std::fs::read_to_string(&path).unwrap()).unwrap();
        multi_graph |= m.graphs.len() > 1;
        let mut state_names = BTreeSet::new();
        for g in &m.graphs {
            for n in g.walk() {
                let nd = &g.nodes[n];
                ops.insert(nd.op);
                devices |= nd.device.is_some();
                deps |= !nd.control_deps.is_empty();
                if let Some(name) = nd.attrs.str("name") {
                    named_state_shared |= !state_names.insert((nd.op, name.to_string()));
                }
            }
        }
    }
    // `grad` means nothing until the compiler's autodiff lowering expands it, and the compiler's
    // tests run the examples as they are: its op table example (which verifies) and
    // compiler/tests/grad.rs cover it.
    let missing: Vec<&str> =
        Op::ALL.iter().filter(|&&o| !ops.contains(&o) && o != Op::Grad).map(|o| o.name()).collect();
    assert!(missing.is_empty(), "ops no example uses: {missing:?}");
    assert!(devices && deps && multi_graph && named_state_shared);
}
