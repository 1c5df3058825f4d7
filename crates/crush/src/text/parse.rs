//! Parser for Ceph's CRUSH text format.

use std::collections::{BTreeMap, BTreeSet};

use super::weight::parse_weight;
use crate::error::{CrushError, Result};
use crate::map::{
    Bucket, BucketAlg, CrushMap, RULE_ERASURE, RULE_REPLICATED, Rule, Step, Tunables, WEIGHT_ONE,
};

#[derive(Debug, Clone)]
struct Tok<'a> {
    text: &'a str,
    line: usize,
}

struct Tokens<'a> {
    toks: Vec<Tok<'a>>,
    pos: usize,
}

fn err<T>(line: usize, msg: impl Into<String>) -> Result<T> {
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

struct ItemDecl<'a> {
    name: &'a str,
    weight: Option<u32>,
    pos: Option<i32>,
    line: usize,
}

struct BucketDecl<'a> {
    type_name: &'a str,
    name: &'a str,
    id: Option<i32>,
    class_ids: Vec<(&'a str, i32)>,
    alg: Option<BucketAlg>,
    hash: u8,
    items: Vec<ItemDecl<'a>>,
    line: usize,
}

struct RuleDecl<'a> {
    name: Option<&'a str>,
    id: i32,
    rule_type: u8,
    min_size: i32,
    max_size: i32,
    steps: Vec<(StepDecl<'a>, usize)>,
    line: usize,
}

enum StepDecl<'a> {
    Take(&'a str, Option<&'a str>),
    Choose {
        leaf: bool,
        firstn: bool,
        n: i32,
        type_name: &'a str,
    },
    Plain(Step),
}

enum Decl<'a> {
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
    Compiler::default().run(decls)
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

/// The semantic pass, in file order, as `CrushCompiler::parse_crush`.
#[derive(Default)]
struct Compiler {
    map: CrushMap,
    /// Every item name -> id.
    item_id: BTreeMap<String, i32>,
    /// Ids taken by buckets (explicit ones are reserved up front).
    used_ids: BTreeSet<i32>,
    /// Weight of each bucket defined so far (default weight when used as an item).
    bucket_weight: BTreeMap<i32, u32>,
    /// Shadow ids given in the text: original id -> class id -> shadow id.
    class_ids: BTreeMap<i32, BTreeMap<i32, i32>>,
    saw_rule: bool,
}

impl Compiler {
    fn run(mut self, decls: Vec<Decl<'_>>) -> Result<CrushMap> {
        self.map.tunables = Tunables::legacy();
        for d in &decls {
            if let Decl::Bucket(b) = d {
                if let Some(id) = b.id {
                    self.used_ids.insert(id);
                }
            }
        }
        for d in decls {
            match d {
                Decl::Tunable(name, v, line) => self.tunable(name, v, line)?,
                Decl::Device(id, name, class) => {
                    if self.item_id.insert(name.to_string(), id).is_some() {
                        return Err(CrushError::Invalid(format!("item {name} defined twice")));
                    }
                    self.map.add_device(id, name, class)?;
                }
                Decl::Type(id, name) => self.map.add_type(id, name),
                Decl::Bucket(b) => {
                    if self.saw_rule {
                        return err(b.line, "buckets must be defined before rules");
                    }
                    self.bucket(b)?;
                }
                Decl::Rule(r) => {
                    if !self.saw_rule {
                        self.saw_rule = true;
                        self.map.populate_classes(&self.class_ids)?;
                    }
                    self.rule(r)?;
                }
            }
        }
        self.map.finalize()?;
        Ok(self.map)
    }

    fn tunable(&mut self, name: &str, v: i32, line: usize) -> Result<()> {
        let v = v as u32;
        let t = &mut self.map.tunables;
        match name {
            "choose_local_tries" => t.choose_local_tries = v,
            "choose_local_fallback_tries" => t.choose_local_fallback_tries = v,
            "choose_total_tries" => t.choose_total_tries = v,
            "chooseleaf_descend_once" => t.chooseleaf_descend_once = v,
            "chooseleaf_vary_r" => t.chooseleaf_vary_r = v,
            "chooseleaf_stable" => t.chooseleaf_stable = v,
            "straw_calc_version" => t.straw_calc_version = v,
            "allowed_bucket_algs" => t.allowed_bucket_algs = v,
            _ => return err(line, format!("tunable {name} not recognized")),
        }
        Ok(())
    }

    fn bucket(&mut self, b: BucketDecl<'_>) -> Result<()> {
        let Some(type_id) = self.map.type_id(b.type_name) else {
            return err(
                b.line,
                format!("bucket type '{}' is not defined", b.type_name),
            );
        };
        if self.item_id.contains_key(b.name) {
            return err(
                b.line,
                format!("bucket or device '{}' is already defined", b.name),
            );
        }
        let Some(alg) = b.alg else {
            return err(b.line, format!("bucket {} has no alg", b.name));
        };
        let (items, weights) = self.bucket_items(&b, alg)?;
        let id = match b.id {
            Some(id) => id,
            None => {
                let mut id = -1;
                while self.used_ids.contains(&id) {
                    id -= 1;
                }
                id
            }
        };
        self.used_ids.insert(id);
        for (class, shadow) in &b.class_ids {
            let cid = self.map.class_id_or_create(class);
            if self
                .class_ids
                .entry(id)
                .or_default()
                .insert(cid, *shadow)
                .is_some()
            {
                return err(
                    b.line,
                    format!("duplicate device class {class} for bucket {}", b.name),
                );
            }
        }
        let bucket = Bucket {
            id,
            name: b.name.to_string(),
            type_id,
            alg,
            hash: b.hash,
            items,
            weights,
            class: None,
        };
        self.bucket_weight.insert(id, bucket.weight());
        self.item_id.insert(b.name.to_string(), id);
        self.map.add_bucket(bucket)
    }

    fn bucket_items(&self, b: &BucketDecl<'_>, alg: BucketAlg) -> Result<(Vec<i32>, Vec<u32>)> {
        let mut used = BTreeSet::new();
        for it in &b.items {
            if let Some(p) = it.pos {
                if !used.insert(p) {
                    return err(
                        it.line,
                        format!("item '{}' has an occupied pos {p}", it.name),
                    );
                }
            }
        }
        let size = b
            .items
            .len()
            .max(used.last().map_or(0, |p| (*p).max(0) as usize));
        let mut slots: Vec<Option<(i32, u32)>> = vec![None; size];
        let mut cur = 0i32;
        let mut uniform: Option<u32> = None;
        for it in &b.items {
            let Some(&id) = self.item_id.get(it.name) else {
                return err(
                    it.line,
                    format!("item '{}' in bucket '{}' is not defined", it.name, b.name),
                );
            };
            let w = it
                .weight
                .unwrap_or_else(|| self.bucket_weight.get(&id).copied().unwrap_or(WEIGHT_ONE));
            if alg == BucketAlg::Uniform && *uniform.get_or_insert(w) != w {
                return err(
                    it.line,
                    "uniform bucket items must all have identical weights",
                );
            }
            let pos = match it.pos {
                Some(p) => p,
                None => {
                    while used.contains(&cur) {
                        cur += 1;
                    }
                    cur += 1;
                    cur - 1
                }
            };
            match usize::try_from(pos).ok().and_then(|p| slots.get_mut(p)) {
                Some(slot) => *slot = Some((id, w)),
                None => {
                    return err(
                        it.line,
                        format!("item '{}' pos {pos} out of range", it.name),
                    );
                }
            }
        }
        let (items, weights) = slots.into_iter().map(|s| s.unwrap_or((0, 0))).unzip();
        Ok((items, weights))
    }

    fn rule(&mut self, r: RuleDecl<'_>) -> Result<()> {
        let mut steps = Vec::with_capacity(r.steps.len());
        for (s, line) in r.steps {
            steps.push(match s {
                StepDecl::Plain(p) => p,
                StepDecl::Take(item, class) => Step::Take(self.take_item(item, class, line)?),
                StepDecl::Choose {
                    leaf,
                    firstn,
                    n,
                    type_name,
                } => {
                    let Some(type_id) = self.map.type_id(type_name) else {
                        return err(line, format!("type '{type_name}' not defined"));
                    };
                    match (leaf, firstn) {
                        (false, true) => Step::ChooseFirstN { n, type_id },
                        (false, false) => Step::ChooseIndep { n, type_id },
                        (true, true) => Step::ChooseLeafFirstN { n, type_id },
                        (true, false) => Step::ChooseLeafIndep { n, type_id },
                    }
                }
            });
        }
        let rule = Rule {
            id: r.id as u32,
            name: r.name.unwrap_or_default().to_string(),
            rule_type: r.rule_type,
            min_size: r.min_size,
            max_size: r.max_size,
            steps,
        };
        self.map
            .add_rule(rule)
            .or_else(|e| err(r.line, e.to_string()))
    }

    fn take_item(&self, item: &str, class: Option<&str>, line: usize) -> Result<i32> {
        let Some(&id) = self.item_id.get(item) else {
            return err(line, format!("item '{item}' not defined"));
        };
        let Some(class) = class else {
            return Ok(id);
        };
        match self.map.class_shadow(id, class) {
            Some(s) => Ok(s),
            None => err(
                line,
                format!("step take {item} has no bucket for class {class}"),
            ),
        }
    }
}
