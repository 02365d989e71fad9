//! Reproducers from a review of the training support (autodiff, optimizers, `graphc train`):
//! each test is a bug found there (fixed with it), or a case of a gradient rule the review
//! checked against central finite differences in f64 (negative axes, keep_dims, strided and
//! empty slices, negative gather indices, batch broadcasting on both sides of a matmul,
//! grouped and dilated convolutions with asymmetric pads, pooling with ceil_mode, the losses'
//! reductions and label dtypes).

use graphc::backend::LOWERINGS;
use graphc::passes::PassManager;
use graphc_ir::{Module, TensorData};
use graphc_runtime::{RunRequest, Session, SessionOptions, Tensor};
use std::sync::Arc;

/// The module of `text` with `grad` expanded, or the expansion's error.
fn lower(text: &str) -> Result<Module, String> {
    let mut m = graphc_ir::parse_module(text).unwrap_or_else(|d| panic!("parse: {d:?}\n{text}"));
    PassManager::new(LOWERINGS).unwrap().run(&mut m, &mut |_| {}).map_err(|e| e.to_string())?;
    let diags = graphc_ir::verify_module(&m);
    assert!(diags.is_empty(), "autodiff's output does not verify: {diags:?}\n{}", graphc_ir::print_module(&m));
    Ok(m)
}

fn f64_tensor(shape: &[usize], data: Vec<f64>) -> Tensor {
    Tensor::from_data(shape, TensorData::F64(data)).unwrap()
}

/// Runs `graph` of a lowered module on `feeds`; each output as f64s.
fn run(s: &Session, graph: &str, feeds: &[(&str, Tensor)]) -> Vec<Vec<f64>> {
    let mut req = RunRequest::new(graph);
    for (name, t) in feeds {
        req = req.feed(name.to_string(), Arc::new(t.clone()));
    }
    let out = s.run(req).unwrap_or_else(|e| panic!("running @{graph}: {e}"));
    out.values.iter().map(|v| v.as_tensor().expect("a tensor").to_f64_vec()).collect()
}

fn run_text(text: &str, feeds: &[(&str, Tensor)]) -> Vec<Vec<f64>> {
    let m = lower(text).unwrap_or_else(|e| panic!("autodiff: {e}"));
    let s = Session::new(m, SessionOptions::default()).unwrap();
    run(&s, "g", feeds)
}

/// Deterministic, well spread values in [lo, hi).
fn spread(n: usize, lo: f64, hi: f64, seed: u64) -> Vec<f64> {
    let mut order: Vec<usize> = (0..n).collect();
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    for i in (1..n).rev() {
        s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        order.swap(i, (s >> 33) as usize % (i + 1));
    }
    order.iter().map(|&k| lo + (hi - lo) * (k as f64 + 0.5) / n as f64).collect()
}

/// An f64 input of the finite-difference check: its name, shape and values.
struct In {
    name: &'static str,
    shape: Vec<usize>,
    data: Vec<f64>,
}

fn input(name: &'static str, shape: &[usize], lo: f64, hi: f64, seed: u64) -> In {
    let n = shape.iter().product();
    In { name, shape: shape.to_vec(), data: spread(n, lo, hi, seed) }
}

fn ty(i: &In) -> String {
    format!("f64[{}]", i.shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(","))
}

/// Checks `grad` of the scalar `%out` (computed by `body` from the f64 inputs `ins`, plus the
/// non-differentiated `extra` inputs, given as `%name: type` and a tensor) against central
/// differences, every element of every input in `ins`. The loss is `sum(%out * W)`, W uneven.
fn check(ins: Vec<In>, extra: &[(&str, &str, Tensor)], body: &str, out_ty: &str) {
    let n: usize = {
        let dims = out_ty.trim_start_matches("f64[").trim_end_matches(']');
        dims.split(',').filter(|d| !d.is_empty()).map(|d| d.trim().parse::<usize>().unwrap()).product()
    };
    let rank = out_ty.trim_start_matches("f64[").trim_end_matches(']').split(',').filter(|d| !d.is_empty()).count();
    let w: Vec<String> = (0..n).map(|i| format!("{:?}", 0.5 + (1.3 * i as f64 + 0.2).sin())).collect();
    let axes: Vec<String> = (0..rank).map(|a| a.to_string()).collect();
    let weights = if rank == 0 {
        format!("dense<{}> : {out_ty}", w[0])
    } else {
        // A flat literal reshaped, so any rank is spelled the same way.
        format!("dense<[{}]> : f64[{n}]", w.join(", "))
    };
    let params: Vec<String> = ins
        .iter()
        .map(|i| format!("%{}: {}", i.name, ty(i)))
        .chain(extra.iter().map(|(n, t, _)| format!("%{n}: {t}")))
        .collect();
    let loss_body = format!(
        "{body}\n  %w_flat = constant {{value = {weights}}} : {}\n  %w_all = reshape %w_flat {{shape = [{}]}} : {out_ty}\n  %weighted = mul %out, %w_all : {out_ty}\n  %loss = reduce_sum %weighted {{axes = [{}]}} : f64[]\n",
        if rank == 0 { out_ty.to_string() } else { format!("f64[{n}]") },
        out_ty.trim_start_matches("f64[").trim_end_matches(']'),
        axes.join(", ")
    );
    let names: Vec<String> = ins.iter().map(|i| format!("%{}", i.name)).collect();
    let types: Vec<String> = ins.iter().map(ty).collect();
    let results: Vec<String> = (0..ins.len()).map(|k| format!("%d{k}")).collect();
    let outs: Vec<String> = (0..ins.len()).map(|k| format!("d{k}: {}", types[k])).collect();
    let text = format!(
        "graph @loss({p}) -> (loss: f64[]) {{\n{loss_body}  return %loss\n}}\n\ngraph @grad({p}) -> (loss: f64[], {o}) {{\n{loss_body}  {r} = grad %loss, {n} : {t}\n  return %loss, {r}\n}}\n",
        p = params.join(", "),
        o = outs.join(", "),
        r = results.join(", "),
        n = names.join(", "),
        t = types.join(", "),
    );
    let m = lower(&text).unwrap_or_else(|e| panic!("autodiff: {e}\n{text}"));
    let s = Session::new(m.clone(), SessionOptions::default()).unwrap();
    let feeds = |ins: &[In]| -> Vec<(&str, Tensor)> {
        ins.iter()
            .map(|i| (i.name, f64_tensor(&i.shape, i.data.clone())))
            .chain(extra.iter().map(|(n, _, t)| (*n, t.clone())))
            .collect()
    };
    let got = run(&s, "grad", &feeds(&ins));
    let mut ins = ins;
    for k in 0..ins.len() {
        assert_eq!(got[k + 1].len(), ins[k].data.len());
        for (j, &want) in got[k + 1].iter().enumerate() {
            let x = ins[k].data[j];
            let h = 1e-6 * x.abs().max(1.0);
            ins[k].data[j] = x + h;
            let up = run(&s, "loss", &feeds(&ins))[0][0];
            ins[k].data[j] = x - h;
            let down = run(&s, "loss", &feeds(&ins))[0][0];
            ins[k].data[j] = x;
            let fd = (up - down) / (2.0 * h);
            let tol = 1e-5 * (1.0 + fd.abs().max(want.abs()));
            assert!(
                (fd - want).abs() <= tol,
                "d loss / d %{}[{j}]: autodiff {want} but finite differences {fd}\n{}",
                ins[k].name,
                graphc_ir::print_module(&m)
            );
        }
    }
}

// ----- bugs found (fixed) -----

/// max_pool's indices are -1 for a window wholly in the padding; the gradient scattered the
/// adjoint of such a window to index -1, the input's last element.
#[test]
fn max_pool_windows_wholly_in_padding_send_no_gradient() {
    let text = "graph @g() -> (y: f32[1,1,4], dx: f32[1,1,2]) {
  %x = constant {value = dense<[[[1.0, 2.0]]]> : f32[1,1,2]} : f32[1,1,2]
  %p = max_pool %x {kernel = [1], pads = [1, 1]} : f32[1,1,4]
  %l = reduce_sum %p {axes = [0, 1, 2]} : f32[]
  %dx = grad %l, %x : f32[1,1,2]
  return %p, %dx
}
";
    let out = run_text(text, &[]);
    assert_eq!(out[1], vec![1.0, 1.0], "each element is the maximum of its own window only (was [1, 3])");

    // A dilated window can miss the input with pads smaller than the kernel: here the window
    // of output 1 has taps at 0 + 1*3 - 1 = 2 (past the input, in the end padding) and -1.
    let text = "graph @g() -> (dx: f32[1,1,2]) {
  %x = constant {value = dense<[[[1.0, 2.0]]]> : f32[1,1,2]} : f32[1,1,2]
  %p = max_pool %x {kernel = [2], pads = [1, 1], dilations = [3]} : f32[1,1,1]
  %l = reduce_sum %p {axes = [0, 1, 2]} : f32[]
  %dx = grad %l, %x : f32[1,1,2]
  return %dx
}
";
    assert_eq!(run_text(text, &[])[0], vec![0.0, 0.0]);

    // An empty input: every window is padding; the scatter of index -1 into nothing failed.
    let text = "graph @g(%x: f32[1,1,0]) -> (dx: f32[1,1,0]) {
  %p = max_pool %x {kernel = [1], pads = [1, 1]} : f32[1,1,2]
  %l = reduce_sum %p {axes = [0, 1, 2]} : f32[]
  %dx = grad %l, %x : f32[1,1,0]
  return %dx
}
";
    let x = Tensor::from_data(&[1, 1, 0], TensorData::F32(vec![])).unwrap();
    assert_eq!(run_text(text, &[("x", x)])[0], Vec::<f64>::new());
}

/// The gradient of a `while` recomputes its body: every node was copied, effects included,
/// so an `assign_add` counting iterations ran 12 times for 3 iterations.
#[test]
fn while_gradient_does_not_repeat_the_body_effects() {
    let text = "graph @g(%x: f32[]) -> (y: f32[], dx: f32[], c: f32[]) {
  %i0 = constant {value = dense<0> : i64[]} : i64[]
  %n = constant {value = dense<3> : i64[]} : i64[]
  %r0, %r1, %r2 = while %i0, %n, %x : i64[], i64[], f32[]
    cond(%i: i64[], %m: i64[], %a: f32[]) {
      %c0 = less %i, %m : bool[]
      yield %c0
    }
    body(%j: i64[], %k: i64[], %b: f32[]) {
      %h = variable {name = \"count\", init = dense<0.0> : f32[]} : var<f32[]>
      %one = constant {value = dense<1.0> : f32[]} : f32[]
      %t = assign_add %h, %one : f32[]
      %one_i = constant {value = dense<1> : i64[]} : i64[]
      %j1 = add %j, %one_i : i64[]
      %b2 = mul %b, %b : f32[]
      yield %j1, %k, %b2
    }
  %dx = grad %r2, %x : f32[]
  %h2 = variable {name = \"count\", init = dense<0.0> : f32[]} : var<f32[]>
  %cnt = read %h2 after(%dx) : f32[]
  return %r2, %dx, %cnt
}
";
    let x = Tensor::from_data(&[], TensorData::F32(vec![1.5])).unwrap();
    let out = run_text(text, &[("x", x)]);
    assert_eq!(out[1], vec![8.0 * 1.5f64.powi(7)], "d(x^8)/dx");
    assert_eq!(out[2], vec![3.0], "the body's assign_add runs once per forward iteration");
}

/// The same for `cond`: the gradient's cond ran the branch's `assign_add` again.
#[test]
fn cond_gradient_does_not_repeat_the_branch_effects() {
    let text = "graph @g(%p: bool[], %x: f32[2]) -> (dx: f32[2], c: f32[], l: f32[]) {
  %r = cond %p, %x : f32[2]
    then(%b: f32[2]) {
      %h = variable {name = \"count\", init = dense<0.0> : f32[]} : var<f32[]>
      %one = constant {value = dense<1.0> : f32[]} : f32[]
      %t = assign_add %h, %one : f32[]
      %e = exp %b : f32[2]
      yield %e
    }
    else(%b2: f32[2]) {
      yield %b2
    }
  %l = reduce_sum %r {axes = [0]} : f32[]
  %dx = grad %l, %x : f32[2]
  %h2 = variable {name = \"count\", init = dense<0.0> : f32[]} : var<f32[]>
  %cnt = read %h2 after(%dx, %l) : f32[]
  return %dx, %cnt, %l
}
";
    let p = Tensor::from_data(&[], TensorData::Bool(vec![true])).unwrap();
    let x = Tensor::from_data(&[2], TensorData::F32(vec![0.0, 1.0])).unwrap();
    let out = run_text(text, &[("p", p), ("x", x)]);
    assert_eq!(out[1], vec![1.0], "the branch's assign_add runs once");
    assert!((out[0][1] - std::f64::consts::E).abs() < 1e-6, "{:?}", out[0]);
}

/// A value the recomputation needs from an effect cannot be had again: a `dequeue` in a
/// branch (it would take the next element), a `read` in a loop whose body writes the variable
/// (it would see the writes of every iteration). Both are errors naming the op, where the
/// gradient silently used other values.
#[test]
fn recomputing_an_effect_a_gradient_needs_is_an_error() {
    let dequeue = "graph @g(%p: bool[], %x: f32[2]) -> (dx: f32[2]) {
  %r = cond %p, %x : f32[2]
    then(%b: f32[2]) {
      %q = queue {name = \"q\", capacity = 2} : queue<f32[2]>
      %d = dequeue %q : f32[2]
      %m = mul %b, %d : f32[2]
      yield %m
    }
    else(%e: f32[2]) {
      yield %e
    }
  %l = reduce_sum %r {axes = [0]} : f32[]
  %dx = grad %l, %x : f32[2]
  return %dx
}
";
    let e = lower(dequeue).unwrap_err();
    assert!(e.contains("'dequeue %d'") && e.contains("'cond'"), "{e}");

    let read = "graph @g(%x: f32[]) -> (dx: f32[]) {
  %i0 = constant {value = dense<0> : i64[]} : i64[]
  %n = constant {value = dense<3> : i64[]} : i64[]
  %r0, %r1, %r2 = while %i0, %n, %x : i64[], i64[], f32[]
    cond(%i: i64[], %m: i64[], %a: f32[]) {
      %c0 = less %i, %m : bool[]
      yield %c0
    }
    body(%j: i64[], %k: i64[], %b: f32[]) {
      %h = variable {name = \"s\", init = dense<1.0> : f32[]} : var<f32[]>
      %sv = read %h : f32[]
      %two = constant {value = dense<2.0> : f32[]} : f32[]
      %t = assign_add %h, %two after(%sv) : f32[]
      %one_i = constant {value = dense<1> : i64[]} : i64[]
      %j1 = add %j, %one_i : i64[]
      %b2 = mul %b, %sv : f32[]
      yield %j1, %k, %b2
    }
  %dx = grad %r2, %x : f32[]
  return %dx
}
";
    let e = lower(read).unwrap_err();
    assert!(e.contains("'read %sv'") && e.contains("'while'"), "{e}");

    // A read in a region that writes nothing is recomputed as it was.
    let fine = read.replace("%t = assign_add %h, %two after(%sv) : f32[]", "%t = add %two, %sv : f32[]");
    let x = Tensor::from_data(&[], TensorData::F32(vec![2.0])).unwrap();
    let m = lower(&fine).unwrap();
    let s = Session::new(m, SessionOptions::default()).unwrap();
    assert_eq!(run(&s, "g", &[("x", x)])[0], vec![1.0]);
}

/// reduce_max's gradient where the maximum is NaN: TensorFlow's `indicators / num_selected *
/// grad` (and JAX's rule) give NaN; the rule masked the NaN share away and gave 0, hiding the
/// NaN from the optimizer.
#[test]
fn reduce_max_of_a_nan_gives_a_nan_gradient_as_tensorflow() {
    let text = "graph @g(%x: f64[2,3]) -> (dx: f64[2,3]) {
  %m = reduce_max %x {axes = [1]} : f64[2]
  %l = reduce_sum %m {axes = [0]} : f64[]
  %dx = grad %l, %x : f64[2,3]
  return %dx
}
";
    let x = f64_tensor(&[2, 3], vec![1.0, f64::NAN, 3.0, 4.0, 6.0, 6.0]);
    let dx = &run_text(text, &[("x", x)])[0];
    assert!(dx[..3].iter().all(|d| d.is_nan()), "{dx:?}");
    assert_eq!(&dx[3..], &[0.0, 0.5, 0.5], "ties split evenly");
}

/// `grad ... after(%t)`: the expansion dropped the grad's `after` list, so a node ordered after
/// the gradient no longer needed `%t`, and a run fetching it skipped the `assign_add` (r was 0).
#[test]
fn a_grad_keeps_its_after_list() {
    let text = "graph @g(%x: f32[2]) -> (r: f32[], dx: f32[2]) {
  %v = variable {name = \"v\", init = dense<0.0> : f32[]} : var<f32[]>
  %one = constant {value = dense<1.0> : f32[]} : f32[]
  %t = assign_add %v, %one : f32[]
  %xx = mul %x, %x : f32[2]
  %s = reduce_sum %xx {axes = [0]} : f32[]
  %dx = grad %s, %x after(%t) : f32[2]
  %r = read %v after(%dx) : f32[]
  return %r, %dx
}
";
    let x = Tensor::from_data(&[2], TensorData::F32(vec![0.5, 1.0])).unwrap();
    let out = run_text(text, &[("x", x)]);
    assert_eq!(out, vec![vec![1.0], vec![1.0, 2.0]]);
}

// ----- rules checked against finite differences -----

#[test]
fn reductions_with_negative_axes_and_keep_dims() {
    for (op, keep) in [("reduce_sum", true), ("reduce_mean", false), ("reduce_max", true), ("reduce_min", false)] {
        let out = if keep { "f64[2,1,1]" } else { "f64[2]" };
        let body = format!("  %out = {op} %x {{axes = [-1, -2], keep_dims = {keep}}} : {out}");
        check(vec![input("x", &[2, 3, 4], -2.0, 2.0, 1)], &[], &body, out);
    }
}

#[test]
fn slices_with_negative_starts_steps_and_empty_results() {
    let body = "  %out = slice %x {starts = [-4, 1], ends = [100, -1], steps = [2, 3]} : f64[2,2]";
    check(vec![input("x", &[5, 7], -1.0, 1.0, 2)], &[], body, "f64[2,2]");
    let body = "  %s = slice %x {starts = [3, 0], ends = [1, 7]} : f64[0,7]
  %r = reduce_sum %s {axes = [0]} : f64[7]
  %out = add %r, %x2 : f64[7]";
    check(vec![input("x", &[5, 7], -1.0, 1.0, 3), input("x2", &[7], -1.0, 1.0, 4)], &[], body, "f64[7]");
}

#[test]
fn gather_with_negative_and_repeated_indices() {
    let idx = Tensor::from_data(&[4], TensorData::I32(vec![-1, 0, -1, 2])).unwrap();
    let body = "  %out = gather %x, %i {axis = -1} : f64[2,4]";
    check(vec![input("x", &[2, 3], -1.0, 1.0, 5)], &[("i", "i32[4]", idx)], body, "f64[2,4]");
}

#[test]
fn pad_with_zero_size_dims_and_interior() {
    let body = "  %out = pad %x, %v {low = [1, 0], high = [2, 1], interior = [1, 2]} : f64[3,1]";
    check(vec![input("x", &[0, 0], -1.0, 1.0, 6), input("v", &[], -1.0, 1.0, 7)], &[], body, "f64[3,1]");
    let body = "  %out = pad %x, %v {low = [1, 0], high = [0, 2], interior = [2, 1]} : f64[2,7]";
    check(vec![input("x", &[1, 3], -1.0, 1.0, 8), input("v", &[], -1.0, 1.0, 9)], &[], body, "f64[2,7]");
}

#[test]
fn matmul_batch_broadcasting_on_both_sides() {
    let body = "  %out = matmul %a, %b {transpose_b = true} : f64[2,3,2,4]";
    check(
        vec![input("a", &[2, 1, 2, 5], -1.0, 1.0, 10), input("b", &[3, 4, 5], -1.0, 1.0, 11)],
        &[],
        body,
        "f64[2,3,2,4]",
    );
    let body = "  %out = matmul %a, %b {transpose_a = true} : f64[3,2,2,4]";
    check(
        vec![input("a", &[3, 1, 5, 2], -1.0, 1.0, 12), input("b", &[2, 5, 4], -1.0, 1.0, 13)],
        &[],
        body,
        "f64[3,2,2,4]",
    );
}

#[test]
fn losses_with_label_dtypes_rank_3_logits_and_reductions() {
    for (dtype, labels) in [
        ("i32", Tensor::from_data(&[2, 3], TensorData::I32(vec![0, 3, 1, 2, 2, 0])).unwrap()),
        ("i64", Tensor::from_data(&[2, 3], TensorData::I64(vec![3, 3, 0, 1, 2, 1])).unwrap()),
    ] {
        for (reduction, out) in [("none", "f64[2,3]"), ("sum", "f64[]"), ("mean", "f64[]")] {
            let body = format!("  %out = softmax_cross_entropy %x, %l {{reduction = \"{reduction}\"}} : {out}");
            let ty = format!("{dtype}[2,3]");
            check(vec![input("x", &[2, 3, 4], -2.0, 2.0, 14)], &[("l", ty.as_str(), labels.clone())], &body, out);
        }
    }
    for (reduction, out) in [("none", "f64[2,3]"), ("sum", "f64[]"), ("mean", "f64[]")] {
        let body = format!("  %out = mean_squared_error %p, %t {{reduction = \"{reduction}\"}} : {out}");
        check(vec![input("p", &[2, 3], -2.0, 2.0, 15), input("t", &[2, 3], -2.0, 2.0, 16)], &[], &body, out);
    }
}

#[test]
fn conv_with_groups_dilations_and_asymmetric_pads() {
    // x [1, 4, 6, 5], w [6, 2, 2, 3], group 2, strides [2, 1], pads [1, 0, 0, 2], dilations [1, 2]:
    // H: (6 + 1 + 0 - 2) / 2 + 1 = 3; W: (5 + 0 + 2 - 5) / 1 + 1 = 3.
    let body =
        "  %out = conv %x, %w {strides = [2, 1], pads = [1, 0, 0, 2], dilations = [1, 2], group = 2} : f64[1,6,3,3]";
    check(
        vec![input("x", &[1, 4, 6, 5], -1.0, 1.0, 17), input("w", &[6, 2, 2, 3], -1.0, 1.0, 18)],
        &[],
        body,
        "f64[1,6,3,3]",
    );
}

#[test]
fn pooling_with_ceil_mode_and_padding() {
    // H: ceil((6 + 1 + 0 - 2) / 2) + 1 = 4, the last window starting on the last row and
    // reaching past the input (floor would give 3); W: (4 + 0 + 1 - 3) / 2 + 1 = 2, the last
    // window's third tap in the end padding.
    let attrs = "kernel = [2, 3], strides = [2, 2], pads = [1, 0, 0, 1], ceil_mode = true";
    let body = format!("  %out = max_pool %x {{{attrs}}} : f64[1,2,4,2]");
    check(vec![input("x", &[1, 2, 6, 4], -1.0, 1.0, 19)], &[], &body, "f64[1,2,4,2]");
    for include in [false, true] {
        let body = format!("  %out = avg_pool %x {{{attrs}, count_include_pad = {include}}} : f64[1,2,4,2]");
        check(vec![input("x", &[1, 2, 6, 4], -1.0, 1.0, 20)], &[], &body, "f64[1,2,4,2]");
    }
}

#[test]
fn the_same_value_twice_and_the_loss_itself_as_wrt() {
    let text = "graph @g(%x: f64[2], %u: f64[]) -> (a: f64[2], b: f64[2], c: f64[], d: f64[]) {
  %y = mul %x, %x : f64[2]
  %l = reduce_sum %y {axes = [0]} : f64[]
  %a, %b, %c, %d = grad %l, %x, %x, %l, %u : f64[2], f64[2], f64[], f64[]
  return %a, %b, %c, %d
}
";
    let out = run_text(text, &[("x", f64_tensor(&[2], vec![1.0, -2.0])), ("u", f64_tensor(&[], vec![5.0]))]);
    assert_eq!(out, vec![vec![2.0, -4.0], vec![2.0, -4.0], vec![1.0], vec![0.0]]);
}

// ----- graphc train -----

fn tmpdir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("graphc-review-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs graphc, failing the test if it has not ended within a minute.
fn graphc_within_a_minute(args: &[&str]) -> std::process::Output {
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_graphc"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("graphc runs");
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > std::time::Duration::from_secs(60) {
            let _ = child.kill();
            panic!("graphc {args:?} did not end within a minute");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// An f64 loss near the largest f64 (here -1.7e308, then 1.7e308): the plot's padded range
/// overflowed, and plotters' tick computation never ended, so `graphc train` hung after the
/// last step.
#[test]
fn plotting_losses_near_the_largest_f64_ends() {
    let dir = tmpdir("plot");
    let gir = dir.join("step.gir");
    std::fs::write(
        &gir,
        "graph @step() -> (loss: f64[]) {
  %v = variable {name = \"v\", init = dense<-1.0> : f64[]} : var<f64[]>
  %r = read %v : f64[]
  %big = constant {value = dense<1.7e308> : f64[]} : f64[]
  %l = mul %r, %big : f64[]
  %two = constant {value = dense<2.0> : f64[]} : f64[]
  %u = assign_add %v, %two after(%l) : f64[]
  %out = identity %l after(%u) : f64[]
  return %out
}
",
    )
    .unwrap();
    let svg = dir.join("loss.svg");
    let o = graphc_within_a_minute(&["train", gir.to_str().unwrap(), "--steps", "2", "--plot", svg.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.contains("e308"), "the axis is labelled with the losses as they are");
}

/// A step graph whose update no output depends on never runs it (a step runs what its
/// outputs need), so `graphc train` trained nothing, silently: the loss stayed where it was.
#[test]
fn an_update_no_output_needs_is_a_warning() {
    let dir = tmpdir("unreached");
    let gir = dir.join("step.gir");
    std::fs::write(
        &gir,
        "graph @step(%x: f32[2,1]) -> (loss: f32[]) {
  %w = variable {name = \"w\", init = dense<1.0> : f32[1]} : var<f32[1]>
  %wv = read %w : f32[1]
  %p = mul %x, %wv : f32[2,1]
  %loss = reduce_sum %p {axes = [0, 1]} : f32[]
  %dw = grad %loss, %wv : f32[1]
  %lr = constant {value = dense<0.1> : f32[]} : f32[]
  %u = apply_sgd %w, %lr, %dw : f32[1]
  return %loss
}
",
    )
    .unwrap();
    let o = graphc_within_a_minute(&["train", gir.to_str().unwrap(), "--steps", "2"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("warning: no output of @step depends on 'apply_sgd %u'"), "{err}");
    // Tied to the loss, it runs, and there is no warning.
    let fixed = std::fs::read_to_string(&gir)
        .unwrap()
        .replace("  return %loss", "  %out = identity %loss after(%u) : f32[]\n  return %out");
    std::fs::write(&gir, fixed).unwrap();
    let o = graphc_within_a_minute(&["train", gir.to_str().unwrap(), "--steps", "2"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success() && !err.contains("warning"), "{err}");
}
