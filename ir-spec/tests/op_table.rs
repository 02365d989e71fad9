//! Every op's example in the table parses, verifies, uses that op, and prints back unchanged.

use graphc_ir::{equiv::modules_equal, parse_module, print_module, verify_module, Op};

#[test]
fn every_op_example_is_canonical_and_verifies() {
    for &op in Op::ALL {
        let ex = op.def().example;
        let m = parse_module(ex).unwrap_or_else(|d| panic!("{}: example does not parse: {d:?}\n{ex}", op.name()));
        assert!(verify_module(&m).is_empty(), "{}: example does not verify", op.name());
        assert!(
            m.graphs[0].walk().iter().any(|&n| m.graphs[0].nodes[n].op == op),
            "{}: example does not use the op",
            op.name()
        );
        assert_eq!(print_module(&m), ex, "{}: example is not canonical", op.name());
        let again = parse_module(&print_module(&m)).unwrap();
        modules_equal(&m, &again).unwrap();
    }
}

#[test]
fn names_are_unique_and_resolve() {
    for &op in Op::ALL {
        assert_eq!(Op::from_name(op.name()), Some(op));
        assert!(!op.def().summary.is_empty() && !op.def().semantics.is_empty());
    }
}
