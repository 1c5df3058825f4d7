//! Parser for Ceph's CRUSH text format.

use std::collections::{BTreeMap, BTreeSet};

use super::weight::parse_weight;
use crate::error::{CrushError, Result};
use crate::map::{BucketAlg, CrushMap, RULE_ERASURE, RULE_REPLICATED, Step};

#[derive(Debug, Clone)]
struct Tok<'a> {
    text: &'a str,
    line: usize,
}

struct Tokens<'a> {
    toks: Vec<Tok<'a>>,
    pos: usize,
}

pub(super) fn err<T>(line: usize, msg: impl Into<String>) -> Result<T> {
    Err(CrushError::Parse {
        line,
        msg: msg.into(),
    })
}

impl<'a> Tokens<'a> {
    fn new(input: &'a str) -> Self {
        let mut toks = Vec::new();
        for (i, raw) in input.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("");
            let mut start = None;
            for (j, ch) in line.char_indices() {
                let brace = matches!(ch, '{' | '}' | '[' | ']');
                if ch.is_whitespace() || brace {
                    if let Some(s) = start.take() {
                        toks.push(Tok {
                            text: &line[s..j],
                            line: i + 1,
                        });
                    }
                    if brace {
                        toks.push(Tok {
                            text: &line[j..j + 1],
                            line: i + 1,
                        });
                    }
                } else if start.is_none() {
                    start = Some(j);
                }
            }
            if let Some(s) = start {
                toks.push(Tok {
                    text: &line[s..],
                    line: i + 1,
                });
            }
        }
        Tokens { toks, pos: 0 }
    }

    fn peek(&self) -> Option<&Tok<'a>> {
        self.toks.get(self.pos)
    }

    fn line(&self) -> usize {
        self.toks
            .get(self.pos)
            .or_else(|| self.toks.last())
            .map_or(0, |t| t.line)
    }

    fn next(&mut self) -> Result<Tok<'a>> {
        let line = self.line();
        let t = self.toks.get(self.pos).cloned();
        self.pos += 1;
        t.map_or_else(|| err(line, "unexpected end of input"), Ok)
    }

    fn word(&mut self) -> Result<&'a str> {
        Ok(self.next()?.text)
    }

    fn expect(&mut self, want: &str) -> Result<()> {
        let t = self.next()?;
        if t.text != want {
            return err(t.line, format!("expected '{want}', found '{}'", t.text));
        }
        Ok(())
    }

    fn int(&mut self) -> Result<i32> {
        let t = self.next()?;
        t.text
            .parse()
            .or_else(|_| err(t.line, format!("expected an integer, found '{}'", t.text)))
    }

    fn eat(&mut self, want: &str) -> bool {
        if self.peek().is_some_and(|t| t.text == want) {
            self.pos += 1;
            return true;
        }
        false
    }
}

pub(super) struct ItemDecl<'a> {
    pub(super) name: &'a str,
    pub(super) weight: Option<u32>,
    pub(super) pos: Option<i32>,
    pub(super) line: usize,
}

pub(super) struct BucketDecl<'a> {
    pub(super) type_name: &'a str,
    pub(super) name: &'a str,
    pub(super) id: Option<i32>,
    pub(super) class_ids: Vec<(&'a str, i32)>,
    pub(super) alg: Option<BucketAlg>,
    pub(super) hash: u8,
    pub(super) items: Vec<ItemDecl<'a>>,
    pub(super) line: usize,
}

pub(super) struct RuleDecl<'a> {
    pub(super) name: Option<&'a str>,
    pub(super) id: i32,
    pub(super) rule_type: u8,
    pub(super) min_size: i32,
    pub(super) max_size: i32,
    pub(super) steps: Vec<(StepDecl<'a>, usize)>,
    pub(super) line: usize,
}

pub(super) enum StepDecl<'a> {
    Take(&'a str, Option<&'a str>),
    Choose {
        leaf: bool,
        firstn: bool,
        n: i32,
        type_name: &'a str,
    },
    Plain(Step),
}

pub(super) enum Decl<'a> {
    Tunable(&'a str, i32, usize),
    Device(i32, &'a str, Option<&'a str>),
    Type(i32, &'a str),
    Bucket(BucketDecl<'a>),
    Rule(RuleDecl<'a>),
}

/// Parses a map in Ceph's text form (as `crushtool -c` does).
pub fn parse(input: &str) -> Result<CrushMap> {
    let mut t = Tokens::new(input);
    let mut decls = Vec::new();
    while let Some(tok) = t.peek() {
        let line = tok.line;
        let d = match tok.text {
            "tunable" => {
                t.pos += 1;
                let name = t.word()?;
                Decl::Tunable(name, t.int()?, line)
            }
            "device" => {
                t.pos += 1;
                let id = t.int()?;
                let name = t.word()?;
                let class = if t.eat("class") {
                    Some(t.word()?)
                } else {
                    None
                };
                Decl::Device(id, name, class)
            }
            "type" => {
                t.pos += 1;
                let id = t.int()?;
                Decl::Type(id, t.word()?)
            }
            "rule" => Decl::Rule(parse_rule(&mut t)?),
            "choose_args" => return err(line, "choose_args (weight sets) are not supported"),
            _ => Decl::Bucket(parse_bucket(&mut t)?),
        };
        decls.push(d);
    }
    adjust_bucket_order(&mut decls)?;
    super::compile::Compiler::default().run(decls)
}

fn parse_bucket<'a>(t: &mut Tokens<'a>) -> Result<BucketDecl<'a>> {
    let line = t.line();
    let type_name = t.word()?;
    let name = t.word()?;
    t.expect("{")?;
    let mut b = BucketDecl {
        type_name,
        name,
        id: None,
        class_ids: Vec::new(),
        alg: None,
        hash: 0,
        items: Vec::new(),
        line,
    };
    loop {
        let tok = t.next()?;
        match tok.text {
            "}" => break,
            "id" => {
                let id = t.int()?;
                if t.eat("class") {
                    b.class_ids.push((t.word()?, id));
                } else {
                    b.id = Some(id);
                }
            }
            "alg" => {
                let a = t.word()?;
                b.alg = Some(match a {
                    "straw2" => BucketAlg::Straw2,
                    "uniform" => BucketAlg::Uniform,
                    "list" => BucketAlg::List,
                    _ => return err(tok.line, format!("bucket algorithm '{a}' is not supported")),
                });
            }
            "hash" => {
                let h = t.word()?;
                b.hash = match h {
                    "rjenkins1" | "0" => 0,
                    _ => return err(tok.line, format!("hash '{h}' is not supported")),
                };
            }
            "item" => {
                let mut it = ItemDecl {
                    name: t.word()?,
                    weight: None,
                    pos: None,
                    line: tok.line,
                };
                loop {
                    if t.eat("weight") {
                        let w = t.next()?;
                        it.weight =
                            Some(parse_weight(w.text).map_or_else(
                                || err(w.line, format!("bad weight '{}'", w.text)),
                                Ok,
                            )?);
                    } else if t.eat("pos") {
                        it.pos = Some(t.int()?);
                    } else {
                        break;
                    }
                }
                b.items.push(it);
            }
            other => return err(tok.line, format!("unexpected '{other}' in bucket {name}")),
        }
    }
    Ok(b)
}

fn parse_rule<'a>(t: &mut Tokens<'a>) -> Result<RuleDecl<'a>> {
    let line = t.line();
    t.expect("rule")?;
    let name = if t.eat("{") {
        None
    } else {
        let n = t.word()?;
        t.expect("{")?;
        Some(n)
    };
    let mut r = RuleDecl {
        name,
        id: -1,
        rule_type: 0,
        min_size: 1,
        max_size: 10,
        steps: Vec::new(),
        line,
    };
    loop {
        let tok = t.next()?;
        match tok.text {
            "}" => break,
            "id" | "ruleset" => r.id = t.int()?,
            "type" => {
                let ty = t.word()?;
                r.rule_type = match ty {
                    "replicated" => RULE_REPLICATED,
                    "erasure" => RULE_ERASURE,
                    n => n
                        .parse()
                        .or_else(|_| err(tok.line, format!("rule type '{n}'")))?,
                };
            }
            "min_size" => r.min_size = t.int()?,
            "max_size" => r.max_size = t.int()?,
            "step" => r.steps.push((parse_step(t)?, tok.line)),
            other => return err(tok.line, format!("unexpected '{other}' in rule")),
        }
    }
    if r.id < 0 {
        return err(line, "rule without id");
    }
    Ok(r)
}

fn parse_step<'a>(t: &mut Tokens<'a>) -> Result<StepDecl<'a>> {
    let tok = t.next()?;
    let plain = |s| Ok(StepDecl::Plain(s));
    match tok.text {
        "take" => {
            let item = t.word()?;
            let class = if t.eat("class") {
                Some(t.word()?)
            } else {
                None
            };
            Ok(StepDecl::Take(item, class))
        }
        "choose" | "chooseleaf" => {
            let mode = t.word()?;
            let firstn = match mode {
                "firstn" => true,
                "indep" => false,
                _ => {
                    return err(
                        tok.line,
                        format!("expected firstn or indep, found '{mode}'"),
                    );
                }
            };
            let n = t.int()?;
            t.expect("type")?;
            Ok(StepDecl::Choose {
                leaf: tok.text == "chooseleaf",
                firstn,
                n,
                type_name: t.word()?,
            })
        }
        "emit" => plain(Step::Emit),
        "noop" => plain(Step::Noop),
        "set_choose_tries" => plain(Step::SetChooseTries(t.int()?)),
        "set_chooseleaf_tries" => plain(Step::SetChooseLeafTries(t.int()?)),
        "set_choose_local_tries" => plain(Step::SetChooseLocalTries(t.int()?)),
        "set_choose_local_fallback_tries" => plain(Step::SetChooseLocalFallbackTries(t.int()?)),
        "set_chooseleaf_vary_r" => plain(Step::SetChooseLeafVaryR(t.int()?)),
        "set_chooseleaf_stable" => plain(Step::SetChooseLeafStable(t.int()?)),
        other => err(tok.line, format!("unknown step '{other}'")),
    }
}

/// Ceph's `adjust_bucket_item_place`: a bucket that uses a bucket defined
/// later swaps places with it, so forward references compile.
fn adjust_bucket_order(decls: &mut [Decl<'_>]) -> Result<()> {
    let idx: Vec<usize> = (0..decls.len())
        .filter(|i| matches!(decls[*i], Decl::Bucket(_)))
        .collect();
    let name_of = |d: &Decl<'_>| match d {
        Decl::Bucket(b) => b.name.to_string(),
        _ => String::new(),
    };
    let items_of = |d: &Decl<'_>| -> BTreeSet<String> {
        match d {
            Decl::Bucket(b) => b.items.iter().map(|i| i.name.to_string()).collect(),
            _ => BTreeSet::new(),
        }
    };
    let names: Vec<String> = idx.iter().map(|i| name_of(&decls[*i])).collect();
    let items: BTreeMap<String, BTreeSet<String>> = idx
        .iter()
        .map(|i| (name_of(&decls[*i]), items_of(&decls[*i])))
        .collect();
    // Ceph swaps the parse-tree nodes it found by name before any swap and
    // never updates those positions; doing the same keeps the same order.
    for i in 0..names.len() {
        for j in i + 1..names.len() {
            let (a, b) = (&names[i], &names[j]);
            if items.get(a).is_some_and(|s| s.contains(b)) {
                if items.get(b).is_some_and(|s| s.contains(a)) {
                    return Err(CrushError::Invalid(format!(
                        "buckets '{a}' and '{b}' include each other"
                    )));
                }
                decls.swap(idx[i], idx[j]);
            }
        }
    }
    Ok(())
}
