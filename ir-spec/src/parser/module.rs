//! A module's graphs: each graph's header (inputs, declared outputs), its body, and the
//! outputs bound to what the body returns.

use super::{GraphCtx, Key, Operand, PResult, Parser};
use crate::diag::{Diagnostic, Span};
use crate::graph::{Graph, Module, Output, Region};
use crate::lexer::Tok;
use crate::types::Type;
use std::collections::HashMap;

impl Parser {
    pub(super) fn module(&mut self) -> Module {
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
}
