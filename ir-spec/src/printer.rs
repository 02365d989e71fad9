//! The printer: one canonical text for a module. Unnamed values are numbered densely in the
//! order they are defined, so dead arena slots never show and `print(parse(text))` is a fixed
//! point for canonical text.

use crate::attr::write_string_literal;
use crate::graph::{is_plain_name, Graph, Module, Node, Region, Value};
use std::collections::HashMap;
use std::fmt::Write;

/// Prints a whole module; graphs are separated by a blank line.
pub fn print_module(m: &Module) -> String {
    let mut out = String::new();
    for (i, g) in m.graphs.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        print_graph_into(g, &mut out);
    }
    write_comments(&mut out, &m.end_comments, 0);
    out
}

pub fn print_graph(g: &Graph) -> String {
    let mut out = String::new();
    print_graph_into(g, &mut out);
    out
}

fn print_graph_into(g: &Graph, out: &mut String) {
    let mut p = Printer { g, out, numbers: HashMap::new(), next: 0 };
    p.graph();
}

struct Printer<'a> {
    g: &'a Graph,
    out: &'a mut String,
    numbers: HashMap<Value, usize>,
    next: usize,
}

fn write_comments(out: &mut String, comments: &[String], depth: usize) {
    for c in comments {
        for _ in 0..depth {
            out.push_str("  ");
        }
        out.push_str("//");
        out.push_str(c);
        out.push('\n');
    }
}

/// Writes a name bare when it can be, else as a quoted string.
fn write_name(out: &mut String, name: &str) {
    if is_plain_name(name) {
        out.push_str(name);
    } else {
        let _ = write_string_literal(out, name);
    }
}

impl Printer<'_> {
    /// Numbers a value at its definition.
    fn define(&mut self, v: Value) {
        if self.g.values[v].name.is_none() {
            self.numbers.insert(v, self.next);
            self.next += 1;
        }
        self.value(v);
    }

    fn value(&mut self, v: Value) {
        self.out.push('%');
        match (&self.g.values[v].name, self.numbers.get(&v)) {
            (Some(name), _) => write_name(self.out, name),
            (None, Some(n)) => {
                let _ = write!(self.out, "{n}");
            }
            // A use of a value with no definition in the printed text: only broken IR does
            // this; the spelling re-parses as an undefined value, so the error surfaces.
            (None, None) => {
                let _ = write!(self.out, "\"<undefined {v}>\"");
            }
        }
    }

    fn values(&mut self, vs: &[Value]) {
        for (i, &v) in vs.iter().enumerate() {
            if i > 0 {
                self.out.push_str(", ");
            }
            self.value(v);
        }
    }

    fn params(&mut self, vs: &[Value]) {
        for (i, &v) in vs.iter().enumerate() {
            if i > 0 {
                self.out.push_str(", ");
            }
            self.define(v);
            let _ = write!(self.out, ": {}", self.g.values[v].ty);
        }
    }

    fn graph(&mut self) {
        let g = self.g;
        write_comments(self.out, &g.comments, 0);
        self.out.push_str("graph @");
        write_name(self.out, &g.name);
        self.out.push('(');
        self.params(g.inputs());
        self.out.push_str(") -> (");
        for (i, (o, &v)) in g.outputs.iter().zip(g.output_values()).enumerate() {
            if i > 0 {
                self.out.push_str(", ");
            }
            write_name(self.out, &o.name);
            let _ = write!(self.out, ": {}", g.values[v].ty);
        }
        self.out.push_str(") {\n");
        self.body(g.body, 1);
        write_comments(self.out, &g.regions[g.body].end_comments, 1);
        self.out.push_str("  return");
        self.yields(g.body);
        self.out.push_str("}\n");
    }

    fn yields(&mut self, r: Region) {
        let ys = self.g.regions[r].yields.clone();
        if !ys.is_empty() {
            self.out.push(' ');
            self.values(&ys);
        }
        self.out.push('\n');
    }

    fn indent(&mut self, depth: usize) {
        for _ in 0..depth {
            self.out.push_str("  ");
        }
    }

    fn body(&mut self, r: Region, depth: usize) {
        for &n in &self.g.regions[r].nodes {
            self.node(n, depth);
        }
    }

    fn node(&mut self, n: Node, depth: usize) {
        let g = self.g;
        let nd = &g.nodes[n];
        write_comments(self.out, &nd.comments, depth);
        self.indent(depth);
        if !nd.results.is_empty() {
            for (i, &v) in nd.results.iter().enumerate() {
                if i > 0 {
                    self.out.push_str(", ");
                }
                self.define(v);
            }
            self.out.push_str(" = ");
        }
        self.out.push_str(nd.op.name());
        if !nd.operands.is_empty() {
            self.out.push(' ');
            self.values(&nd.operands);
        }
        if !nd.attrs.is_empty() {
            self.out.push_str(" {");
            for (i, (name, a)) in nd.attrs.iter().enumerate() {
                if i > 0 {
                    self.out.push_str(", ");
                }
                let _ = write!(self.out, "{name} = {a}");
            }
            self.out.push('}');
        }
        if !nd.control_deps.is_empty() {
            self.out.push_str(" after(");
            self.values(&nd.control_deps);
            self.out.push(')');
        }
        if let Some(d) = &nd.device {
            self.out.push_str(" device ");
            let _ = write_string_literal(self.out, &d.to_string());
        }
        if !nd.results.is_empty() {
            self.out.push_str(" :");
            for (i, &v) in nd.results.iter().enumerate() {
                self.out.push_str(if i > 0 { ", " } else { " " });
                let _ = write!(self.out, "{}", g.values[v].ty);
            }
        }
        self.out.push('\n');
        for &r in &nd.regions {
            let rd = &g.regions[r];
            self.indent(depth + 1);
            self.out.push_str(&rd.label);
            self.out.push('(');
            self.params(&rd.params.clone());
            self.out.push_str(") {\n");
            self.body(r, depth + 2);
            write_comments(self.out, &rd.end_comments, depth + 2);
            self.indent(depth + 2);
            self.out.push_str("yield");
            self.yields(r);
            self.indent(depth + 1);
            self.out.push_str("}\n");
        }
    }
}
