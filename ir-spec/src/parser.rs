//! The parser: text to a [`Module`], type-checking each node as it is built. It recovers at
//! line boundaries after an error, so one run reports every independent error in a file.

use crate::attr::{Attr, Attrs, TensorData, TensorLiteral};
use crate::device::DeviceSpec;
use crate::diag::{Diagnostic, Span};
use crate::graph::{Graph, Module, NodeSpec, Output, Region, Value};
use crate::lexer::{lex, Comment, Tok, Token};
use crate::ops::{Blame, Op};
use crate::suggest::closest;
use crate::types::{DType, TensorType, Type};
use std::collections::HashMap;
use std::fmt;

/// Regions nest at most this deep; deeper input is rejected rather than risking the stack.
pub const MAX_REGION_DEPTH: usize = 64;
/// Tensor literals nest at most this deep (a rank limit for literals).
pub const MAX_LITERAL_DEPTH: usize = 32;
/// After this many errors the parser stops: the rest would mostly be noise.
pub const MAX_ERRORS: usize = 50;

/// Parses and type-checks a module. On failure, every diagnostic found, in source order.
pub fn parse_module(text: &str) -> Result<Module, Vec<Diagnostic>> {
    let mut diags = Vec::new();
    let (toks, comments) = lex(text, &mut diags);
    let mut p = Parser { toks, pos: 0, diags, stopped: false, comments, next_comment: 0 };
    let module = p.module();
    let mut diags = p.diags;
    if diags.is_empty() {
        diags.extend(crate::verify::check_module_links(&module));
    }
    if diags.is_empty() {
        Ok(module)
    } else {
        diags.sort_by_key(|d| d.span.map_or(0, |s| s.start));
        if diags.len() > MAX_ERRORS {
            diags.truncate(MAX_ERRORS);
            diags.push(Diagnostic::error_unlocated(format!("too many errors; stopped after {MAX_ERRORS}")));
        }
        Err(diags)
    }
}

/// A value's spelling in the text: `%x` or `%3`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Key {
    Name(String),
    Num(u64),
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Key::Name(n) if crate::graph::is_plain_name(n) => write!(f, "%{n}"),
            Key::Name(n) => write!(f, "%{n:?}"),
            Key::Num(n) => write!(f, "%{n}"),
        }
    }
}

/// A definition seen so far in the current graph; `value` is `None` when the statement that
/// defined it failed (uses of it are then skipped silently, to avoid cascades).
struct Def {
    value: Option<Value>,
    region: Region,
    span: Span,
}

struct GraphCtx {
    g: Graph,
    defs: HashMap<Key, Def>,
    /// Uses that found no definition: (key, diagnostic index), revisited at the graph's end to
    /// tell "used before its definition" from "undefined".
    undefined: Vec<(Key, usize)>,
    /// Set when the graph's header failed: its inputs are unknown, so undefined names are not
    /// reported again.
    lenient: bool,
}

/// Error already reported; the caller recovers.
struct Reported;
type PResult<T> = Result<T, Reported>;

struct Parser {
    toks: Vec<Token>,
    pos: usize,
    diags: Vec<Diagnostic>,
    stopped: bool,
    comments: Vec<Comment>,
    next_comment: usize,
}

/// A parsed operand reference: the value, or `None` if it refers to a failed definition.
type Operand = (Option<Value>, Span);

impl Parser {
    fn peek(&self) -> &Tok {
        &self.toks[self.pos].tok
    }

    fn peek_at(&self, n: usize) -> &Tok {
        &self.toks[(self.pos + n).min(self.toks.len() - 1)].tok
    }

    fn span(&self) -> Span {
        self.toks[self.pos].span
    }

    fn prev_span(&self) -> Span {
        self.toks[self.pos.saturating_sub(1)].span
    }

    /// Moves past the current token and returns its span.
    fn bump(&mut self) -> Span {
        let span = self.toks[self.pos].span;
        if self.pos + 1 < self.toks.len() {
            self.pos += 1;
        }
        span
    }

    fn is_ident(&self, s: &str) -> bool {
        matches!(self.peek(), Tok::Ident(i) if i == s)
    }

    fn eat(&mut self, t: &Tok) -> bool {
        if self.peek() == t {
            self.bump();
            true
        } else {
            false
        }
    }

    /// The comments not yet attached that start before the current token.
    fn take_comments(&mut self) -> Vec<String> {
        let before = self.span().start as usize;
        let mut out = Vec::new();
        while let Some(c) =
            self.comments.get(self.next_comment).filter(|c| c.start < before || self.peek() == &Tok::Eof)
        {
            out.push(c.text.clone());
            self.next_comment += 1;
        }
        out
    }

    fn error(&mut self, span: Span, msg: impl Into<String>) -> Reported {
        self.diag(Diagnostic::error(span, msg))
    }

    fn diag(&mut self, d: Diagnostic) -> Reported {
        if self.diags.len() <= MAX_ERRORS {
            self.diags.push(d);
        } else {
            self.stopped = true;
        }
        Reported
    }

    fn expected(&mut self, what: &str) -> Reported {
        let found = self.peek().describe();
        let span = self.span();
        self.error(span, format!("expected {what}, found {found}"))
    }

    fn expect(&mut self, t: Tok, what: &str) -> PResult<Span> {
        if self.peek() == &t {
            Ok(self.bump())
        } else {
            Err(self.expected(what))
        }
    }

    fn expect_ident(&mut self, what: &str) -> PResult<(String, Span)> {
        match self.peek().clone() {
            Tok::Ident(s) => Ok((s, self.bump())),
            _ => Err(self.expected(what)),
        }
    }

    /// Skips to the start of the next statement, `return`/`yield` or region end at this
    /// nesting level; braces opened while skipping are skipped whole.
    fn sync(&mut self) {
        let mut depth = 0usize;
        loop {
            let t = &self.toks[self.pos];
            let at_line_start = t.line_start;
            match &t.tok {
                Tok::Eof => return,
                Tok::RBrace if depth == 0 && at_line_start => return,
                Tok::ValueName(_) | Tok::ValueNum(_) if depth == 0 && at_line_start => return,
                Tok::Ident(s)
                    if depth == 0
                        && at_line_start
                        && (s == "return" || s == "yield" || s == "graph" || Op::from_name(s).is_some()) =>
                {
                    return
                }
                Tok::LBrace => depth += 1,
                Tok::RBrace => depth = depth.saturating_sub(1),
                _ => {}
            }
            self.bump();
        }
    }

    fn module(&mut self) -> Module {
        let mut module = Module::default();
        let mut names: HashMap<String, Span> = HashMap::new();
        if self.peek() == &Tok::Eof {
            let span = self.span();
            self.error(span, "the file holds no graph; a module is one or more 'graph @name(...) -> (...) { ... }'");
        }
        while self.peek() != &Tok::Eof && !self.stopped {
            if !self.is_ident("graph") {
                self.expected("'graph'");
                self.bump();
                while self.peek() != &Tok::Eof && !(self.is_ident("graph") && self.toks[self.pos].line_start) {
                    self.bump();
                }
                continue;
            }
            let comments = self.take_comments();
            if let Some(mut g) = self.graph() {
                g.comments = comments;
                if let Some(&prev) = names.get(&g.name) {
                    let d = Diagnostic::error(g.span, format!("graph @{} is defined twice", g.name))
                        .with_note(prev, "first defined here");
                    self.diag(d);
                } else {
                    names.insert(g.name.clone(), g.span);
                }
                module.graphs.push(g);
            }
        }
        module.end_comments = self.take_comments();
        module
    }

    fn graph(&mut self) -> Option<Graph> {
        let start = self.bump();
        let name = match self.peek().clone() {
            Tok::Global(n) => {
                self.bump();
                n
            }
            _ => {
                self.expected("a graph name like @main");
                String::from("<error>")
            }
        };
        let mut cx = GraphCtx { g: Graph::new(name), defs: HashMap::new(), undefined: Vec::new(), lenient: false };
        cx.g.span = start.to(self.prev_span());
        let body = cx.g.body;
        let header = self.graph_header(&mut cx, body);
        if header.is_err() {
            cx.lenient = true;
            // Skip to the body's opening brace, if any, so its statements are still checked.
            while !(matches!(self.peek(), Tok::LBrace | Tok::Eof)
                || self.is_ident("graph") && self.toks[self.pos].line_start)
            {
                self.bump();
            }
            if !self.eat(&Tok::LBrace) {
                return None;
            }
        }
        let declared_outputs = header.unwrap_or_default();
        let ret = self.region_body(&mut cx, body, "return", 1);
        if let (Some((vals, ret_span)), false) = (ret, cx.lenient) {
            self.bind_outputs(&mut cx, declared_outputs, vals, ret_span);
        }
        self.resolve_undefined(&cx);
        Some(cx.g)
    }

    /// `(%x: f32[2], ...) -> (name: type, ...) {`; returns the declared outputs.
    fn graph_header(&mut self, cx: &mut GraphCtx, body: Region) -> PResult<Vec<(String, Span, Type)>> {
        self.expect(Tok::LParen, "'(' and the graph's inputs")?;
        if !self.eat(&Tok::RParen) {
            loop {
                let (key, span) = self.value_token("an input like %x: f32[2]")?;
                if let Key::Num(_) = key {
                    return Err(self.error(span, "graph inputs need names, like %x, so they can be fed"));
                }
                self.expect(Tok::Colon, "':' and the input's type")?;
                let ty = self.ty()?;
                let v = cx.g.add_param(body, ty, span);
                self.define(cx, key, span, Some(v), body);
                if !self.eat(&Tok::Comma) {
                    break;
                }
            }
            self.expect(Tok::RParen, "',' or ')' after an input")?;
        }
        self.expect(Tok::Arrow, "'->' and the graph's outputs")?;
        self.expect(Tok::LParen, "'(' and the graph's outputs, like (y: f32[2])")?;
        let mut outs = Vec::new();
        if !self.eat(&Tok::RParen) {
            loop {
                let (name, span) = match self.peek().clone() {
                    Tok::Ident(s) | Tok::Str(s) => (s, self.bump()),
                    _ => return Err(self.expected("an output name like y")),
                };
                if let Some((_, prev, _)) = outs.iter().find(|(n, _, _)| *n == name) {
                    let d = Diagnostic::error(span, format!("output name '{name}' is used twice"))
                        .with_note(*prev, "first used here");
                    self.diag(d);
                }
                self.expect(Tok::Colon, "':' and the output's type")?;
                let ty = self.ty()?;
                outs.push((name, span, ty));
                if !self.eat(&Tok::Comma) {
                    break;
                }
            }
            self.expect(Tok::RParen, "',' or ')' after an output")?;
        }
        self.expect(Tok::LBrace, "'{' to open the graph's body")?;
        Ok(outs)
    }

    fn bind_outputs(
        &mut self,
        cx: &mut GraphCtx,
        declared: Vec<(String, Span, Type)>,
        vals: Vec<Operand>,
        ret_span: Span,
    ) {
        if declared.len() != vals.len() {
            self.error(
                ret_span,
                format!("the graph declares {} output(s) but returns {} value(s)", declared.len(), vals.len()),
            );
            return;
        }
        let mut yields = Vec::new();
        for ((name, span, ty), (v, vspan)) in declared.into_iter().zip(vals) {
            let Some(v) = v else { return };
            let got = cx.g.value_type(v).clone();
            if got != ty {
                let d = Diagnostic::error(
                    vspan,
                    format!("output '{name}' is declared {ty} but the returned value is {got}"),
                )
                .with_note(span, "declared here");
                self.diag(d);
            }
            cx.g.outputs.push(Output { name, span });
            yields.push(v);
        }
        let body = cx.g.body;
        cx.g.set_yields(body, yields);
    }

    fn resolve_undefined(&mut self, cx: &GraphCtx) {
        for (key, idx) in &cx.undefined {
            if let (Some(def), Some(d)) = (cx.defs.get(key), self.diags.get_mut(*idx)) {
                d.message = format!("{key} is used before its definition");
                d.notes.push((def.span, "defined here".into()));
            }
        }
    }

    /// Statements up to the closing `terminator` line and `}`. Returns the terminator's values.
    fn region_body(
        &mut self,
        cx: &mut GraphCtx,
        region: Region,
        terminator: &str,
        depth: usize,
    ) -> Option<(Vec<Operand>, Span)> {
        loop {
            if self.stopped {
                return None;
            }
            let comments = self.take_comments();
            match self.peek().clone() {
                Tok::Ident(s) if s == terminator => {
                    cx.g.regions[region].end_comments = comments;
                    let span = self.bump();
                    let vals = self.operand_list(cx, region).ok();
                    let close = self.expect(Tok::RBrace, &format!("'}}' after '{terminator}'"));
                    if close.is_err() {
                        self.sync();
                        self.eat(&Tok::RBrace);
                    }
                    return vals.map(|v| (v, span));
                }
                Tok::Ident(s) if s == "return" || s == "yield" => {
                    let span = self.span();
                    let want = if terminator == "return" {
                        "a graph body ends with 'return'"
                    } else {
                        "a region ends with 'yield'"
                    };
                    self.error(span, format!("'{s}' here: {want}"));
                    self.bump();
                    self.sync();
                }
                Tok::RBrace => {
                    let span = self.bump();
                    self.error(span, format!("missing '{terminator}' before '}}'"));
                    return None;
                }
                Tok::Eof => {
                    let span = self.span();
                    self.error(
                        span,
                        format!(
                            "unexpected end of file: expected '{terminator}' and '}}' to close {}",
                            if depth == 1 { "the graph" } else { "a region" }
                        ),
                    );
                    return None;
                }
                Tok::Ident(s) if s == "graph" && self.toks[self.pos].line_start => {
                    let span = self.span();
                    self.error(span, format!("expected '{terminator}' and '}}' before the next graph"));
                    return None;
                }
                _ => {
                    let before = self.pos;
                    if self.statement(cx, region, depth, comments).is_err() {
                        if self.pos == before {
                            self.bump();
                        }
                        self.sync();
                    }
                }
            }
        }
    }

    fn value_token(&mut self, what: &str) -> PResult<(Key, Span)> {
        match self.peek().clone() {
            Tok::ValueName(n) => Ok((Key::Name(n), self.bump())),
            Tok::ValueNum(n) => Ok((Key::Num(n), self.bump())),
            _ => Err(self.expected(what)),
        }
    }

    fn define(&mut self, cx: &mut GraphCtx, key: Key, span: Span, value: Option<Value>, region: Region) {
        if let Some(prev) = cx.defs.get(&key) {
            let d = Diagnostic::error(span, format!("{key} is already defined; value names are unique in a graph"))
                .with_note(prev.span, "previous definition");
            self.diag(d);
            return;
        }
        if let (Key::Name(n), Some(v)) = (&key, value) {
            cx.g.set_name(v, n);
        }
        cx.defs.insert(key, Def { value, region, span });
    }

    fn use_value(&mut self, cx: &mut GraphCtx, region: Region) -> PResult<Operand> {
        let (key, span) = self.value_token("a value like %x")?;
        match cx.defs.get(&key) {
            Some(d) if d.region != region => {
                let note = d.span;
                let diag = Diagnostic::error(
                    span,
                    format!(
                        "{key} is defined outside this region; regions are isolated: pass it in as a region parameter"
                    ),
                )
                .with_note(note, "defined here");
                Err(self.diag(diag))
            }
            Some(d) => Ok((d.value, span)),
            None if cx.lenient => Ok((None, span)),
            None => {
                let idx = self.diags.len();
                self.error(span, format!("{key} is not defined"));
                cx.undefined.push((key, idx));
                Err(Reported)
            }
        }
    }

    fn operand_list(&mut self, cx: &mut GraphCtx, region: Region) -> PResult<Vec<Operand>> {
        let mut out = Vec::new();
        if !matches!(self.peek(), Tok::ValueName(_) | Tok::ValueNum(_)) {
            return Ok(out);
        }
        let mut failed = false;
        loop {
            match self.use_value(cx, region) {
                Ok(o) => out.push(o),
                Err(_) => failed = true,
            }
            if !self.eat(&Tok::Comma) {
                break;
            }
        }
        if failed {
            Err(Reported)
        } else {
            Ok(out)
        }
    }

    fn statement(&mut self, cx: &mut GraphCtx, region: Region, depth: usize, comments: Vec<String>) -> PResult<()> {
        let mut lhs = Vec::new();
        if matches!(self.peek(), Tok::ValueName(_) | Tok::ValueNum(_)) {
            loop {
                lhs.push(self.value_token("a result name like %y")?);
                if !self.eat(&Tok::Comma) {
                    break;
                }
            }
            if let Err(r) = self.expect(Tok::Equals, "'=' after the result names") {
                self.poison(cx, &lhs, region);
                return Err(r);
            }
        }
        let nodes_before = cx.g.regions[region].nodes.len();
        let res = self.statement_rhs(cx, region, depth, &lhs);
        if cx.g.regions[region].nodes.len() > nodes_before {
            let node = cx.g.regions[region].nodes[nodes_before];
            cx.g.nodes[node].comments = comments;
        }
        match res {
            Ok(results) => {
                for ((key, span), v) in lhs.into_iter().zip(results) {
                    self.define(cx, key, span, v, region);
                }
                Ok(())
            }
            Err(r) => {
                self.poison(cx, &lhs, region);
                Err(r)
            }
        }
    }

    fn poison(&mut self, cx: &mut GraphCtx, lhs: &[(Key, Span)], region: Region) {
        for (key, span) in lhs {
            if !cx.defs.contains_key(key) {
                cx.defs.insert(key.clone(), Def { value: None, region, span: *span });
            }
        }
    }

    /// Parses `op operands {attrs} after(...) device "..." : types regions` and builds the
    /// node. Returns one entry per result name (`None` where the node could not be built but
    /// the error was already reported and should not cascade).
    fn statement_rhs(
        &mut self,
        cx: &mut GraphCtx,
        region: Region,
        depth: usize,
        lhs: &[(Key, Span)],
    ) -> PResult<Vec<Option<Value>>> {
        let (opname, op_span) = self.expect_ident("an op name")?;
        let Some(op) = Op::from_name(&opname) else {
            let mut d = Diagnostic::error(op_span, format!("unknown op '{opname}'"));
            if let Some(s) = closest(&opname, Op::ALL.iter().map(|o| o.name())) {
                d = d.with_help(format!("did you mean '{s}'?"));
            }
            return Err(self.diag(d));
        };
        let operands = self.operand_list(cx, region);
        let attrs = if self.peek() == &Tok::LBrace { self.attr_dict(op) } else { Ok((Attrs::new(), HashMap::new())) };
        let mut deps = Ok(Vec::new());
        if self.is_ident("after") {
            self.bump();
            self.expect(Tok::LParen, "'(' after 'after'")?;
            deps = self.operand_list(cx, region);
            self.expect(Tok::RParen, "')' to close the 'after' list")?;
        }
        let mut device = None;
        if self.is_ident("device") {
            self.bump();
            match self.peek().clone() {
                Tok::Str(s) => {
                    let span = self.bump();
                    match DeviceSpec::parse(&s) {
                        Ok(d) => device = Some(d),
                        Err(m) => {
                            self.error(span, m);
                        }
                    }
                }
                _ => return Err(self.expected("a device spec string like \"/job:worker/task:0/device:cpu:0\"")),
            }
        }
        let mut declared = Vec::new();
        if self.eat(&Tok::Colon) {
            loop {
                let start = self.span();
                let t = self.ty()?;
                declared.push((t, start.to(self.prev_span())));
                if !self.eat(&Tok::Comma) {
                    break;
                }
            }
        }
        let mut regions = Vec::new();
        let mut region_spans = Vec::new();
        let mut regions_ok = true;
        for &label in op.def().regions {
            match self.region(cx, label, depth) {
                Ok((r, span)) => {
                    regions.push(r);
                    region_spans.push(span);
                }
                Err(_) => {
                    regions_ok = false;
                    break;
                }
            }
        }
        if !regions_ok {
            return Err(Reported);
        }
        let (operands, (attrs, attr_spans), deps) = (operands?, attrs?, deps?);
        // A reference to a failed definition: the error is already reported.
        let Some(operand_vals) = operands.iter().map(|o| o.0).collect::<Option<Vec<_>>>() else {
            return Ok(vec![None; lhs.len()]);
        };
        let Some(dep_vals) = deps.iter().map(|o| o.0).collect::<Option<Vec<_>>>() else {
            return Ok(vec![None; lhs.len()]);
        };
        let stmt_span = lhs.first().map_or(op_span, |l| l.1).to(self.prev_span());
        let declared_types: Vec<Type> = declared.iter().map(|(t, _)| t.clone()).collect();
        let mut spec = NodeSpec::new(op, operand_vals).span(stmt_span).regions(regions).after(dep_vals);
        spec.attrs = attrs;
        spec.device = device;
        if !declared.is_empty() {
            spec.declared = Some(declared_types.clone());
        }
        let node = match cx.g.add_node(region, spec) {
            Ok(n) => n,
            Err(e) => {
                let span = match e.blame {
                    Blame::Operand(i) => operands.get(i).map_or(op_span, |o| o.1),
                    Blame::Attr(name) => attr_spans.get(name).copied().unwrap_or(op_span),
                    Blame::Region(i) => region_spans.get(i).copied().unwrap_or(op_span),
                    Blame::Result(i) => declared.get(i).map_or(op_span, |d| d.1),
                    Blame::Op => op_span,
                };
                return Err(self.error(span, e.message));
            }
        };
        let results = cx.g.nodes[node].results.clone();
        if !declared.is_empty() {
            if declared.len() != results.len() {
                let span = declared[0].1.to(declared[declared.len() - 1].1);
                self.error(
                    span,
                    format!(
                        "{} gives {} result(s) but {} type(s) are written",
                        op.name(),
                        results.len(),
                        declared.len()
                    ),
                );
            } else {
                for (&v, (t, span)) in results.iter().zip(&declared) {
                    let got = cx.g.value_type(v).clone();
                    if &got != t {
                        self.error(*span, format!("result type written as {t}, but {} gives {got}", op.name()));
                    }
                }
            }
        }
        if lhs.len() != results.len() {
            let span = match (lhs.first(), lhs.last()) {
                (Some(a), Some(b)) => a.1.to(b.1),
                _ => op_span,
            };
            let names = if lhs.len() == 1 { "name is" } else { "names are" };
            return Err(self.error(
                span,
                format!("{} gives {} result(s) but {} {names} bound", op.name(), results.len(), lhs.len()),
            ));
        }
        Ok(results.into_iter().map(Some).collect())
    }

    /// `label(%a: T, ...) { ... yield ... }`
    fn region(&mut self, cx: &mut GraphCtx, label: &str, depth: usize) -> PResult<(Region, Span)> {
        let start = self.span();
        match self.peek().clone() {
            Tok::Ident(s) if s == label => {
                self.bump();
            }
            _ => return Err(self.expected(&format!("region '{label}(...) {{ ... }}'"))),
        }
        if depth >= MAX_REGION_DEPTH {
            return Err(self.error(start, format!("regions are nested more than {MAX_REGION_DEPTH} deep")));
        }
        let r = cx.g.new_region(label, &[]);
        cx.g.regions[r].span = start;
        self.expect(Tok::LParen, &format!("'(' and the parameters of region '{label}'"))?;
        if !self.eat(&Tok::RParen) {
            loop {
                let (key, span) = self.value_token("a region parameter like %a: f32[2]")?;
                self.expect(Tok::Colon, "':' and the parameter's type")?;
                let ty = self.ty()?;
                let v = cx.g.add_param(r, ty, span);
                self.define(cx, key, span, Some(v), r);
                if !self.eat(&Tok::Comma) {
                    break;
                }
            }
            self.expect(Tok::RParen, "',' or ')' after a parameter")?;
        }
        self.expect(Tok::LBrace, &format!("'{{' to open region '{label}'"))?;
        let Some((vals, _)) = self.region_body(cx, r, "yield", depth + 1) else { return Err(Reported) };
        let Some(vals) = vals.into_iter().map(|o| o.0).collect::<Option<Vec<_>>>() else { return Err(Reported) };
        cx.g.set_yields(r, vals);
        Ok((r, start))
    }

    fn ty(&mut self) -> PResult<Type> {
        let handle = match self.peek() {
            Tok::Ident(w) if w == "token" || w == "var" || w == "queue" => w.clone(),
            // Anything else must be a tensor type; its parser says what is wrong.
            _ => return Ok(Type::Tensor(self.tensor_type()?)),
        };
        self.bump();
        match handle.as_str() {
            "token" => Ok(Type::Token),
            "var" => {
                self.expect(Tok::Less, "'<' after 'var'")?;
                let t = self.tensor_type()?;
                self.expect(Tok::Greater, "'>' to close var<...>")?;
                Ok(Type::Var(t))
            }
            _ => {
                self.expect(Tok::Less, "'<' after 'queue'")?;
                let mut ts = vec![self.tensor_type()?];
                while self.eat(&Tok::Comma) {
                    ts.push(self.tensor_type()?);
                }
                self.expect(Tok::Greater, "',' or '>' to close queue<...>")?;
                Ok(Type::Queue(ts))
            }
        }
    }

    fn dtype(&mut self) -> PResult<DType> {
        let (word, span) = self.expect_ident("an element type (f32, f64, i32, i64, bool)")?;
        DType::from_name(&word).ok_or_else(|| {
            let mut d = Diagnostic::error(
                span,
                format!("unknown element type '{word}'; the element types are f32, f64, i32, i64, bool"),
            );
            if let Some(s) = closest(&word, DType::ALL.iter().map(|d| d.name())) {
                d = d.with_help(format!("did you mean '{s}'?"));
            }
            self.diag(d)
        })
    }

    fn tensor_type(&mut self) -> PResult<TensorType> {
        let dtype = self.dtype()?;
        self.expect(Tok::LBracket, "'[' and the shape (write [] for a scalar)")?;
        let mut shape = Vec::new();
        if !self.eat(&Tok::RBracket) {
            loop {
                match self.peek().clone() {
                    Tok::Int(d) if d >= 0 => {
                        self.bump();
                        shape.push(d as u64);
                    }
                    Tok::Int(d) => {
                        let span = self.span();
                        return Err(self.error(span, format!("dimension {d} is negative")));
                    }
                    Tok::Ident(_) => {
                        let span = self.span();
                        return Err(self.error(
                            span,
                            "symbolic dimensions are not supported yet; give every dimension as a number",
                        ));
                    }
                    _ => return Err(self.expected("a dimension size")),
                }
                if !self.eat(&Tok::Comma) {
                    break;
                }
            }
            self.expect(Tok::RBracket, "',' or ']' in the shape")?;
        }
        let t = TensorType::new(dtype, shape);
        if t.num_elements().is_none() {
            let span = self.prev_span();
            return Err(self.error(span, format!("{t} has more elements than fit in 64 bits")));
        }
        Ok(t)
    }

    /// `{name = value, ...}` checked against the op's declared attributes.
    fn attr_dict(&mut self, op: Op) -> PResult<(Attrs, HashMap<&'static str, Span>)> {
        self.bump();
        let mut attrs = Attrs::new();
        let mut spans: HashMap<&'static str, Span> = HashMap::new();
        let def = op.def();
        let mut failed = false;
        if !self.eat(&Tok::RBrace) {
            loop {
                let (name, nspan) = self.expect_ident("an attribute name")?;
                self.expect(Tok::Equals, &format!("'=' after attribute '{name}'"))?;
                let value = self.attr_value()?;
                let span = nspan.to(self.prev_span());
                match def.attr(&name) {
                    None => {
                        let known: Vec<&str> = def.attrs.iter().map(|a| a.name).collect();
                        let mut d = Diagnostic::error(nspan, format!("{} has no attribute '{name}'", op.name()));
                        d = match closest(&name, known.iter().copied()) {
                            Some(s) => d.with_help(format!("did you mean '{s}'?")),
                            None if known.is_empty() => d.with_help(format!("{} takes no attributes", op.name())),
                            None => d.with_help(format!("{} takes: {}", op.name(), known.join(", "))),
                        };
                        self.diag(d);
                        failed = true;
                    }
                    Some(ad) => {
                        if let Some(prev) = spans.get(ad.name) {
                            let d = Diagnostic::error(nspan, format!("attribute '{name}' is given twice"))
                                .with_note(*prev, "first given here");
                            self.diag(d);
                            failed = true;
                        }
                        match value.coerce(ad.kind) {
                            Ok(v) => attrs.set(ad.name, v),
                            Err(v) => {
                                self.error(
                                    span,
                                    format!(
                                        "attribute '{name}' of {} must be {}, not {v}",
                                        op.name(),
                                        ad.kind.describe()
                                    ),
                                );
                                failed = true;
                            }
                        }
                        spans.insert(ad.name, span);
                    }
                }
                if !self.eat(&Tok::Comma) {
                    break;
                }
            }
            self.expect(Tok::RBrace, "',' or '}' in the attribute list")?;
        }
        if failed {
            Err(Reported)
        } else {
            Ok((attrs, spans))
        }
    }

    fn attr_value(&mut self) -> PResult<Attr> {
        let span = self.span();
        match self.peek().clone() {
            Tok::Int(i) => {
                self.bump();
                Ok(Attr::Int(i))
            }
            Tok::Float(f) => {
                self.bump();
                f.parse::<f64>().map(Attr::Float).map_err(|_| self.error(span, format!("malformed number {f}")))
            }
            Tok::Str(s) => {
                self.bump();
                Ok(Attr::Str(s))
            }
            Tok::Minus => {
                self.bump();
                if self.is_ident("inf") {
                    self.bump();
                    Ok(Attr::Float(f64::NEG_INFINITY))
                } else {
                    Err(self.expected("'inf' or a number after '-'"))
                }
            }
            Tok::LBracket => {
                self.bump();
                let mut v = Vec::new();
                if !self.eat(&Tok::RBracket) {
                    loop {
                        match self.peek().clone() {
                            Tok::Int(i) => {
                                self.bump();
                                v.push(i);
                            }
                            _ => return Err(self.expected("an integer (attribute lists hold integers)")),
                        }
                        if !self.eat(&Tok::Comma) {
                            break;
                        }
                    }
                    self.expect(Tok::RBracket, "',' or ']' in the list")?;
                }
                Ok(Attr::Ints(v))
            }
            Tok::Ident(w) => {
                self.bump();
                match w.as_str() {
                    "true" => Ok(Attr::Bool(true)),
                    "false" => Ok(Attr::Bool(false)),
                    "inf" => Ok(Attr::Float(f64::INFINITY)),
                    "nan" => Ok(Attr::Float(f64::NAN)),
                    "dense" => self.dense().map(Attr::Tensor),
                    _ => match DType::from_name(&w) {
                        Some(d) => Ok(Attr::DType(d)),
                        None => Err(self.error(span, format!("'{w}' is not an attribute value; values are numbers, true/false, strings, element types, [integer lists] or dense<...> literals"))),
                    },
                }
            }
            _ => Err(self.expected("an attribute value")),
        }
    }

    /// `dense<LITERAL> : TYPE`, after `dense`.
    fn dense(&mut self) -> PResult<TensorLiteral> {
        self.expect(Tok::Less, "'<' after 'dense'")?;
        let lit_start = self.span();
        let lit = self.literal(0)?;
        self.expect(Tok::Greater, "'>' to close the literal")?;
        self.expect(Tok::Colon, "':' and the literal's type, like dense<1.0> : f32[]")?;
        let ty = self.tensor_type()?;
        let span = lit_start.to(self.prev_span());
        let data = if let Lit::Scalar(s, sspan) = &lit {
            convert(ty.dtype, std::slice::from_ref(&(s.clone(), *sspan))).map_err(|(m, sp)| self.error(sp, m))?
        } else {
            let mut flat = Vec::new();
            if let Err((m, sp)) = flatten(&lit, &ty.shape, 0, &mut flat) {
                return Err(self.error(sp, format!("{m} (the literal's type is {ty})")));
            }
            convert(ty.dtype, &flat).map_err(|(m, sp)| self.error(sp, m))?
        };
        TensorLiteral::new(ty, data).map_err(|m| self.error(span, m))
    }

    fn literal(&mut self, depth: usize) -> PResult<Lit> {
        let span = self.span();
        if depth > MAX_LITERAL_DEPTH {
            return Err(self.error(span, format!("tensor literal nested more than {MAX_LITERAL_DEPTH} deep")));
        }
        let scalar = match self.peek().clone() {
            Tok::LBracket => {
                self.bump();
                let mut items = Vec::new();
                if !self.eat(&Tok::RBracket) {
                    loop {
                        items.push(self.literal(depth + 1)?);
                        if !self.eat(&Tok::Comma) {
                            break;
                        }
                    }
                    self.expect(Tok::RBracket, "',' or ']' in the literal")?;
                }
                return Ok(Lit::List(items, span.to(self.prev_span())));
            }
            Tok::Int(i) => Scalar::Int(i),
            Tok::Float(f) => Scalar::Float(f),
            Tok::Minus if matches!(self.peek_at(1), Tok::Ident(s) if s == "inf") => {
                self.bump();
                Scalar::Float("-inf".into())
            }
            Tok::Ident(w) if w == "true" || w == "false" => Scalar::Bool(w == "true"),
            Tok::Ident(w) if w == "nan" || w == "inf" => Scalar::Float(w),
            _ => return Err(self.expected("a literal element (number, true, false, nan, inf) or '['")),
        };
        let span = span.to(self.bump());
        Ok(Lit::Scalar(scalar, span))
    }
}

#[derive(Clone, Debug)]
enum Scalar {
    Int(i64),
    Float(String),
    Bool(bool),
}

enum Lit {
    List(Vec<Lit>, Span),
    Scalar(Scalar, Span),
}

/// Checks the literal's nesting against the shape and collects its elements in row-major order.
fn flatten(lit: &Lit, shape: &[u64], dim: usize, out: &mut Vec<(Scalar, Span)>) -> Result<(), (String, Span)> {
    match lit {
        Lit::Scalar(s, span) if dim == shape.len() => {
            out.push((s.clone(), *span));
            Ok(())
        }
        Lit::Scalar(_, span) => Err((format!("expected a list for dimension {dim}, found a single element"), *span)),
        Lit::List(_, span) if dim == shape.len() => {
            Err((format!("expected a single element at depth {dim}, found a list"), *span))
        }
        Lit::List(items, span) => {
            if items.len() as u64 != shape[dim] {
                return Err((
                    format!("dimension {dim} has {} elements here but the shape says {}", items.len(), shape[dim]),
                    *span,
                ));
            }
            items.iter().try_for_each(|it| flatten(it, shape, dim + 1, out))
        }
    }
}

fn convert(dtype: DType, items: &[(Scalar, Span)]) -> Result<TensorData, (String, Span)> {
    fn float_of(s: &Scalar, span: Span, dtype: DType) -> Result<f64, (String, Span)> {
        match s {
            Scalar::Int(i) => Ok(*i as f64),
            Scalar::Float(f) => f.parse::<f64>().map_err(|_| (format!("malformed number {f}"), span)),
            Scalar::Bool(_) => Err((format!("{dtype} literal holds a bool"), span)),
        }
    }
    fn int_of(s: &Scalar, span: Span, dtype: DType) -> Result<i64, (String, Span)> {
        match s {
            Scalar::Int(i) => Ok(*i),
            Scalar::Float(f) => Err((format!("{dtype} literal holds the non-integer {f}"), span)),
            Scalar::Bool(_) => Err((format!("{dtype} literal holds a bool"), span)),
        }
    }
    Ok(match dtype {
        DType::F32 => TensorData::F32(
            items
                .iter()
                .map(|(s, span)| {
                    let v = match s {
                        // Parse the text as f32 directly: going through f64 could round twice.
                        Scalar::Float(f) => f.parse::<f32>().map_err(|_| (format!("malformed number {f}"), *span))?,
                        _ => float_of(s, *span, dtype)? as f32,
                    };
                    if v.is_infinite() && !matches!(s, Scalar::Float(f) if f.ends_with("inf")) {
                        return Err(("number is out of range for f32".to_string(), *span));
                    }
                    Ok(v)
                })
                .collect::<Result<_, _>>()?,
        ),
        DType::F64 => TensorData::F64(
            items
                .iter()
                .map(|(s, span)| {
                    let v = float_of(s, *span, dtype)?;
                    if v.is_infinite() && !matches!(s, Scalar::Float(f) if f.ends_with("inf")) {
                        return Err(("number is out of range for f64".to_string(), *span));
                    }
                    Ok(v)
                })
                .collect::<Result<_, _>>()?,
        ),
        DType::I32 => TensorData::I32(
            items
                .iter()
                .map(|(s, span)| {
                    i32::try_from(int_of(s, *span, dtype)?)
                        .map_err(|_| ("number is out of range for i32".to_string(), *span))
                })
                .collect::<Result<_, _>>()?,
        ),
        DType::I64 => TensorData::I64(items.iter().map(|(s, span)| int_of(s, *span, dtype)).collect::<Result<_, _>>()?),
        DType::Bool => TensorData::Bool(
            items
                .iter()
                .map(|(s, span)| match s {
                    Scalar::Bool(b) => Ok(*b),
                    _ => Err(("bool literal holds a number; write true or false".to_string(), *span)),
                })
                .collect::<Result<_, _>>()?,
        ),
    })
}
