//! `shoal crush`: build, test, compare, import and export CRUSH maps.
//!
//! The useful part of Ceph's crushtool. A MAP argument may be Shoal's binary
//! encoding, Ceph's binary map (`crushtool -c` output) or Ceph's text form
//! (`crushtool -d` output); `--show-mappings`
//! prints exactly what `crushtool --test --show-mappings` prints, so the two
//! can be diffed.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, bail};
use clap::{Args, Subcommand, ValueEnum};
use serde_json::json;
use shoal_crush::tester::{self, Utilization, default_weights, format_mapping};
use shoal_crush::text::{parse_weight, print};
use shoal_crush::{BuildSpec, CrushMap, Workspace, build_map};

/// CRUSH map tools, compatible with Ceph's crushtool.
#[derive(Debug, Subcommand)]
pub enum CrushCmd {
    /// Build a map of hosts (optionally in racks) under one root, laid out
    /// as `crushtool --build --num_osds N host straw2 O [rack straw2 H/R] root straw2 0`.
    Build(BuildArgs),
    /// Map inputs through the map's rules (`crushtool --test`).
    Test(TestArgs),
    /// Count how many inputs move between two maps.
    Compare(CompareArgs),
    /// Read a Ceph map (text, or binary as `crushtool -c` / `ceph osd
    /// getcrushmap` write it) and write Shoal's encoding.
    Import {
        /// Ceph map: text (`crushtool -d` output) or binary.
        input: PathBuf,
        /// Output file (Shoal encoding).
        #[arg(short = 'o', long)]
        output: PathBuf,
    },
    /// Print a map in Ceph's text form (what `crushtool -d` prints).
    Export {
        /// Map (Shoal encoding or Ceph text).
        input: PathBuf,
        /// Write here instead of standard output.
        #[arg(short = 'o', long)]
        output: Option<PathBuf>,
    },
    /// Measure mappings per second, beside crushtool when it is installed.
    Bench(BenchArgs),
}

/// Output format.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum OutFormat {
    /// crushtool's text.
    Plain,
    /// JSON.
    Json,
}

/// `shoal crush build`.
#[derive(Debug, Args)]
pub struct BuildArgs {
    /// Number of hosts.
    #[arg(long)]
    hosts: u32,
    /// OSDs in each host.
    #[arg(long)]
    osds_per_host: u32,
    /// Group the hosts into this many racks.
    #[arg(long)]
    racks: Option<u32>,
    /// CRUSH weight of every OSD (e.g. 1.0, 3.64).
    #[arg(long, default_value = "1.0")]
    weight: String,
    /// Output file; without it the map is printed in Ceph's text form.
    #[arg(short = 'o', long)]
    output: Option<PathBuf>,
    /// Write Ceph's text form to the output file instead of Shoal's encoding.
    #[arg(long)]
    text: bool,
}

/// `shoal crush test`.
#[derive(Debug, Args)]
pub struct TestArgs {
    /// Map (Shoal encoding or Ceph text).
    #[arg(short = 'i', long = "input")]
    input: PathBuf,
    /// Result size asked of the rule.
    #[arg(long)]
    num_rep: usize,
    /// First input.
    #[arg(long, default_value_t = 0)]
    min_x: i64,
    /// Last input (inclusive).
    #[arg(long, default_value_t = 1023)]
    max_x: i64,
    /// Only this rule (default: every rule).
    #[arg(long)]
    rule: Option<u32>,
    /// Print every mapping as crushtool does.
    #[arg(long)]
    show_mappings: bool,
    /// Print per-device counts as crushtool does.
    #[arg(long)]
    show_utilization: bool,
    /// Reweight a device for this run: `--weight DEVICE WEIGHT` (0 = out).
    #[arg(long = "weight", num_args = 2, value_names = ["DEVICE", "WEIGHT"])]
    weight: Vec<String>,
    /// Hash each x with this pool id first, as crushtool `--pool-id`.
    #[arg(long)]
    pool_id: Option<u32>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutFormat::Plain)]
    format: OutFormat,
}

/// `shoal crush compare`.
#[derive(Debug, Args)]
pub struct CompareArgs {
    /// The first map.
    a: PathBuf,
    /// The second map.
    b: PathBuf,
    /// Result size asked of the rule.
    #[arg(long, default_value_t = 3)]
    num_rep: usize,
    /// First input.
    #[arg(long, default_value_t = 0)]
    min_x: i64,
    /// Last input (inclusive).
    #[arg(long, default_value_t = 99_999)]
    max_x: i64,
    /// Rule id (default 0).
    #[arg(long, default_value_t = 0)]
    rule: u32,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutFormat::Plain)]
    format: OutFormat,
}

/// `shoal crush bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Map to use; default: a generated map of `--osds` OSDs, 10 per host, 10 hosts per rack.
    #[arg(short = 'i', long = "input")]
    input: Option<PathBuf>,
    /// OSDs in the generated map.
    #[arg(long, default_value_t = 1000)]
    osds: u32,
    /// Result size.
    #[arg(long, default_value_t = 3)]
    num_rep: usize,
    /// Number of inputs to map.
    #[arg(long, default_value_t = 1_000_000)]
    inputs: u32,
    /// Rule id.
    #[arg(long, default_value_t = 0)]
    rule: u32,
    /// Do not run crushtool even if it is installed.
    #[arg(long)]
    no_crushtool: bool,
}

/// Runs one `shoal crush` subcommand.
pub fn run(cmd: CrushCmd) -> anyhow::Result<()> {
    match cmd {
        CrushCmd::Build(a) => build(&a),
        CrushCmd::Test(a) => test(&a),
        CrushCmd::Compare(a) => compare(&a),
        CrushCmd::Import { input, output } => write_file(&output, &load(&input)?.encode()),
        CrushCmd::Export { input, output } => {
            let text = print(&load(&input)?);
            match output {
                Some(o) => write_file(&o, text.as_bytes()),
                None => {
                    out!("{text}");
                    Ok(())
                }
            }
        }
        CrushCmd::Bench(a) => bench(&a),
    }
}

/// Loads a map in Shoal's encoding, Ceph's binary form or Ceph's text form.
fn load(path: &Path) -> anyhow::Result<CrushMap> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    if bytes.starts_with(b"SCRM") {
        return CrushMap::decode(&bytes).with_context(|| format!("decoding {}", path.display()));
    }
    if bytes.starts_with(&shoal_crush::ceph_binary::CEPH_CRUSH_MAGIC) {
        return shoal_crush::ceph_binary::decode(&bytes)
            .with_context(|| format!("decoding Ceph binary map {}", path.display()));
    }
    let text = String::from_utf8(bytes)
        .map_err(|_| anyhow::anyhow!("{}: neither Shoal's encoding nor text", path.display()))?;
    shoal_crush::text::parse(&text).with_context(|| format!("parsing {}", path.display()))
}

fn write_file(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
}

fn weight_arg(s: &str) -> anyhow::Result<u32> {
    parse_weight(s).with_context(|| format!("bad weight '{s}'"))
}

fn build(a: &BuildArgs) -> anyhow::Result<()> {
    let mut spec = BuildSpec::hosts(a.hosts, a.osds_per_host, a.racks);
    spec.osd_weight = weight_arg(&a.weight)?;
    let map = build_map(&spec)?;
    match &a.output {
        Some(o) if a.text => write_file(o, print(&map).as_bytes()),
        Some(o) => write_file(o, &map.encode()),
        None => {
            out!("{}", print(&map));
            Ok(())
        }
    }
}

fn test(a: &TestArgs) -> anyhow::Result<()> {
    let map = load(&a.input)?;
    let mut weights = default_weights(&map);
    for pair in a.weight.chunks(2) {
        let [dev, w] = pair else {
            bail!("--weight needs DEVICE WEIGHT")
        };
        let dev: usize = dev.parse().with_context(|| format!("bad device '{dev}'"))?;
        let w = weight_arg(w)?;
        match weights.get_mut(dev) {
            Some(slot) => *slot = w,
            None => bail!("device {dev} is not in the map"),
        }
    }
    if a.max_x < a.min_x {
        bail!("--max-x is below --min-x");
    }
    let rules: Vec<u32> = match a.rule {
        Some(r) if map.rule(r).is_none() => bail!("no rule {r}"),
        Some(r) => vec![r],
        None => map.rules().map(|r| r.id).collect(),
    };
    let json = a.format == OutFormat::Json;
    let mut report = Vec::new();
    let mut text = String::new();
    for rule in rules {
        if a.show_utilization && !json {
            let name = map.rule(rule).map_or("", |r| r.name.as_str());
            let (lo, hi, n) = (a.min_x, a.max_x, a.num_rep);
            text.push_str(&format!(
                "rule {rule} ({name}), x = {lo}..{hi}, numrep = {n}..{n}\n"
            ));
        }
        let mut mappings = Vec::new();
        let u = run_rule(&map, rule, a, &weights, |x, out| {
            if a.show_mappings {
                if json {
                    mappings.push(Mapping {
                        x,
                        osds: out.to_vec(),
                    });
                } else {
                    let _ = writeln!(text, "{}", format_mapping(rule, x, out));
                }
            }
        });
        let max_affected = tester::max_affected_by_rule(&map, rule);
        if json {
            report.push(rule_json(&map, &u, &weights, max_affected, a, mappings));
        } else {
            out!("{text}");
            text.clear();
            if a.show_utilization {
                out!("{}", utilization_text(&map, &u, &weights, max_affected, a));
            }
        }
    }
    if json {
        outln!("{}", serde_json::to_string(&json!({ "rules": report }))?);
    }
    Ok(())
}

fn run_rule(
    map: &CrushMap,
    rule: u32,
    a: &TestArgs,
    weights: &[u32],
    mut each: impl FnMut(i64, &[i32]),
) -> Utilization {
    match a.pool_id {
        None => tester::run(map, rule, a.num_rep, a.min_x..=a.max_x, weights, each),
        Some(pool) => {
            // crushtool --pool-id: x' = hash(x, pool), reported under x.
            let mut u = Utilization {
                rule,
                num_rep: a.num_rep,
                per_device: vec![0; weights.len()],
                ..Utilization::default()
            };
            let mut ws = Workspace::default();
            let mut out = Vec::new();
            for x in a.min_x..=a.max_x {
                let real = shoal_crush::hash::hash32_2(x as u32, pool);
                map.do_rule_with(&mut ws, rule, real, a.num_rep, weights, &mut out);
                each(x, &out);
                u.inputs += 1;
                *u.sizes.entry(out.len()).or_default() += 1;
                for d in out.iter().filter_map(|d| usize::try_from(*d).ok()) {
                    if let Some(c) = u.per_device.get_mut(d) {
                        *c += 1;
                    }
                }
            }
            u
        }
    }
}

/// crushtool's expected count per device, in its single-precision arithmetic.
fn expected(u: &Utilization, weights: &[u32], max_affected: usize) -> Vec<f32> {
    let total: u64 = weights.iter().map(|w| u64::from(*w)).sum();
    let objects = u.num_rep.min(max_affected) as f32 * u.inputs as f32;
    weights
        .iter()
        .map(|w| {
            if total == 0 {
                0.0
            } else {
                (*w as f32 / total as f32) * objects
            }
        })
        .collect()
}

fn utilization_text(
    map: &CrushMap,
    u: &Utilization,
    weights: &[u32],
    max_affected: usize,
    a: &TestArgs,
) -> String {
    let name = map.rule(u.rule).map_or("", |r| r.name.as_str());
    let _ = a;
    let mut s = String::new();
    for (size, n) in &u.sizes {
        let _ = writeln!(
            s,
            "rule {} ({name}) num_rep {} result size == {size}:\t{n}/{}",
            u.rule, u.num_rep, u.inputs
        );
    }
    let exp = expected(u, weights, max_affected);
    for (i, (stored, e)) in u.per_device.iter().zip(&exp).enumerate() {
        if *e > 0.0 && *stored > 0 {
            let _ = writeln!(
                s,
                "  device {i}:\t\t stored : {stored}\t expected : {}",
                fmt_g(*e)
            );
        }
    }
    s
}

/// One input's placement, as `--show-mappings` gives it in JSON.
#[derive(Debug, serde::Serialize)]
struct Mapping {
    x: i64,
    osds: Vec<i32>,
}

/// One rule's test, as `--format json` gives it.
#[derive(Debug, serde::Serialize)]
struct RuleTest<'a> {
    rule: u32,
    name: &'a str,
    num_rep: usize,
    min_x: i64,
    max_x: i64,
    result_sizes: Vec<SizeCount>,
    utilization: Vec<DeviceUse>,
    stddev_vs_expected: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    mappings: Option<Vec<Mapping>>,
}

#[derive(Debug, serde::Serialize)]
struct SizeCount {
    size: usize,
    count: u64,
}

#[derive(Debug, serde::Serialize)]
struct DeviceUse {
    device: usize,
    stored: u64,
    expected: f32,
}

fn rule_json<'a>(
    map: &'a CrushMap,
    u: &Utilization,
    weights: &[u32],
    max_affected: usize,
    a: &TestArgs,
    mappings: Vec<Mapping>,
) -> RuleTest<'a> {
    let exp = expected(u, weights, max_affected);
    let utilization = u
        .per_device
        .iter()
        .zip(&exp)
        .enumerate()
        .filter(|(_, (s, e))| **s > 0 || **e > 0.0)
        .map(|(device, (s, e))| DeviceUse {
            device,
            stored: *s,
            expected: *e,
        })
        .collect();
    let stored: Vec<f64> = u.per_device.iter().map(|c| *c as f64).collect();
    RuleTest {
        rule: u.rule,
        name: map.rule(u.rule).map_or("", |r| r.name.as_str()),
        num_rep: u.num_rep,
        min_x: a.min_x,
        max_x: a.max_x,
        result_sizes: u
            .sizes
            .iter()
            .map(|(k, n)| SizeCount {
                size: *k,
                count: *n,
            })
            .collect(),
        utilization,
        stddev_vs_expected: stddev(&stored, &exp),
        mappings: a.show_mappings.then_some(mappings),
    }
}

/// Standard deviation of stored - expected over devices with weight.
fn stddev(stored: &[f64], expected: &[f32]) -> f64 {
    let diffs: Vec<f64> = stored
        .iter()
        .zip(expected)
        .filter(|(_, e)| **e > 0.0)
        .map(|(s, e)| s - f64::from(*e))
        .collect();
    if diffs.is_empty() {
        return 0.0;
    }
    (diffs.iter().map(|d| d * d).sum::<f64>() / diffs.len() as f64).sqrt()
}

/// C++ `ostream << float` with the default precision (like `%g`).
fn fmt_g(v: f32) -> String {
    let v = f64::from(v);
    if v == 0.0 {
        return "0".into();
    }
    let exp = v.abs().log10().floor() as i32;
    let sci = format!("{:.5e}", v);
    // Rounding can carry into the next power of ten; take the exponent from it.
    let exp = sci
        .split_once('e')
        .and_then(|(_, e)| e.parse::<i32>().ok())
        .unwrap_or(exp);
    if !(-5..6).contains(&exp) {
        let (m, _) = sci.split_once('e').unwrap_or((&sci, ""));
        let m = trim_zeros(m);
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{m}e{sign}{:02}", exp.abs());
    }
    let decimals = (5 - exp).max(0) as usize;
    trim_zeros(&format!("{v:.decimals$}")).to_string()
}

fn trim_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

fn compare(a: &CompareArgs) -> anyhow::Result<()> {
    let (ma, mb) = (load(&a.a)?, load(&a.b)?);
    let (wa, wb) = (default_weights(&ma), default_weights(&mb));
    if a.max_x < a.min_x {
        bail!("--max-x is below --min-x");
    }
    let m = tester::compare((&ma, &wa), (&mb, &wb), a.rule, a.num_rep, a.min_x..=a.max_x);
    let frac = |n: u64, d: u64| if d == 0 { 0.0 } else { n as f64 / d as f64 };
    if a.format == OutFormat::Json {
        let v = json!({
            "rule": a.rule, "num_rep": a.num_rep, "inputs": m.inputs,
            "changed_inputs": m.changed_inputs, "placements": m.placements,
            "moved_placements": m.moved_placements,
            "changed_fraction": frac(m.changed_inputs, m.inputs),
            "moved_fraction": frac(m.moved_placements, m.placements),
        });
        outln!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        outln!(
            "rule {} num_rep {}: {} of {} inputs changed ({:.4}), {} of {} placements moved ({:.4})",
            a.rule,
            a.num_rep,
            m.changed_inputs,
            m.inputs,
            frac(m.changed_inputs, m.inputs),
            m.moved_placements,
            m.placements,
            frac(m.moved_placements, m.placements)
        );
    }
    Ok(())
}

fn bench(a: &BenchArgs) -> anyhow::Result<()> {
    let map = match &a.input {
        Some(p) => load(p)?,
        None => {
            let hosts = a.osds.div_ceil(10);
            build_map(&BuildSpec::hosts(hosts, 10, Some(hosts.div_ceil(10))))?
        }
    };
    let weights = default_weights(&map);
    let mut ws = Workspace::default();
    let mut out = Vec::with_capacity(a.num_rep);
    let mut checksum = 0u64;
    let start = Instant::now();
    for x in 0..a.inputs {
        map.do_rule_with(&mut ws, a.rule, x, a.num_rep, &weights, &mut out);
        checksum = checksum.wrapping_add(out.iter().map(|d| *d as u64).sum::<u64>());
    }
    let secs = start.elapsed().as_secs_f64();
    let devices = map.devices().count();
    outln!(
        "shoal:     {} mappings of {} replicas on {devices} OSDs in {secs:.3} s = {:.0} mappings/s (checksum {checksum})",
        a.inputs,
        a.num_rep,
        f64::from(a.inputs) / secs
    );
    if !a.no_crushtool {
        crushtool_bench(&map, a)?;
    }
    Ok(())
}

/// Times `crushtool --test` on the same map and inputs (process start included).
fn crushtool_bench(map: &CrushMap, a: &BenchArgs) -> anyhow::Result<()> {
    use std::process::Command;
    if Command::new("crushtool").arg("--help").output().is_err() {
        outln!("crushtool: not installed (apt-get install ceph-base to compare)");
        return Ok(());
    }
    let dir = std::env::temp_dir().join(format!("shoal-crush-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let (txt, bin) = (dir.join("map.txt"), dir.join("map.bin"));
    std::fs::write(&txt, print(map))?;
    let st = Command::new("crushtool")
        .arg("-c")
        .arg(&txt)
        .arg("-o")
        .arg(&bin)
        .status()?;
    if !st.success() {
        bail!("crushtool -c failed");
    }
    let start = Instant::now();
    let st = Command::new("crushtool")
        .arg("-i")
        .arg(&bin)
        .args([
            "--test",
            "--rule",
            &a.rule.to_string(),
            "--num-rep",
            &a.num_rep.to_string(),
        ])
        .args([
            "--min-x",
            "0",
            "--max-x",
            &(i64::from(a.inputs) - 1).to_string(),
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()?;
    let secs = start.elapsed().as_secs_f64();
    let _ = std::fs::remove_dir_all(&dir);
    if !st.success() {
        bail!("crushtool --test failed");
    }
    outln!(
        "crushtool: {} mappings in {secs:.3} s = {:.0} mappings/s (crushtool --test, whole process)",
        a.inputs,
        f64::from(a.inputs) / secs
    );
    Ok(())
}
