//! Every op's example in the table parses, verifies, uses that op, and prints back unchanged.

use graphc_ir::ops::{Cost, RegionFlow};
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

/// An op's facts agree with each other: it has regions exactly when it says how they run, and
/// is priced by its regions exactly then; only a value kept for the session is resident.
#[test]
fn region_flow_cost_and_residency_agree() {
    for &op in Op::ALL {
        let d = op.def();
        let has_regions = !d.regions.is_empty();
        assert_eq!(has_regions, d.flow != RegionFlow::NoRegions, "{}: regions and flow disagree", op.name());
        assert_eq!(has_regions, d.cost == Cost::Regions, "{}: regions and cost disagree", op.name());
        if d.flow == RegionFlow::Loop || d.flow == RegionFlow::OneOf {
            assert_eq!(d.regions.len(), 2, "{}: a loop or a choice has two regions", op.name());
        }
        if d.resident {
            assert!(d.min_operands == 0 && d.max_operands == Some(0), "{}: a resident value is a source", op.name());
        }
    }
}
