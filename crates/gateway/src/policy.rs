//! Bucket policies: the JSON documents AWS defines (Version, Statement with
//! Effect, Principal, Action/NotAction, Resource/NotResource, Condition),
//! checked when a client sets one and evaluated for every request to the
//! bucket, as AWS evaluates them: an explicit Deny wins over everything,
//! an Allow grants what the ACLs would not, and no match leaves the
//! decision to the owner and the ACLs.
//!
//! Principals are `*` (anyone, anonymous included) or the gateway's users,
//! named `arn:aws:iam:::user/<uid>`, `arn:aws:iam::<account>:user/<uid>`
//! or by uid alone. Conditions take the string, numeric, boolean and IP
//! address operators (with `…IfExists`) on `aws:SourceIp`,
//! `aws:SecureTransport`, `aws:username`, `aws:userid`, `aws:Referer`,
//! `aws:UserAgent`, `s3:prefix`, `s3:delimiter`, `s3:max-keys`,
//! `s3:VersionId`, `s3:x-amz-<header>` (the request's header of that name;
//! `s3:x-amz-copy-source` as `<bucket>/<key>`), `s3:ExistingObjectTag/<key>`
//! and `s3:RequestObjectTag/<key>` (the tags the request gives).
//! Anything else in a document is refused with `MalformedPolicy` when it
//! is set, never ignored when it is evaluated.

use std::collections::BTreeMap;
use std::net::IpAddr;

use s3s::{S3Error, s3_error};
use serde_json::Value;

/// A policy document's size at most (AWS's limit).
pub const POLICY_BYTES_MAX: usize = 20 * 1024;

/// A parsed bucket policy.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    statements: Vec<Statement>,
}

#[derive(Debug, Clone, PartialEq)]
struct Statement {
    allow: bool,
    /// `None`: anyone (`*`).
    principals: Option<Vec<String>>,
    actions: Vec<String>,
    not_action: bool,
    resources: Vec<String>,
    not_resource: bool,
    conditions: Vec<Condition>,
}

#[derive(Debug, Clone, PartialEq)]
struct Condition {
    op: Operator,
    negated: bool,
    if_exists: bool,
    key: String,
    values: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operator {
    StringEquals,
    StringEqualsIgnoreCase,
    StringLike,
    NumericEquals,
    NumericLessThan,
    NumericLessThanEquals,
    NumericGreaterThan,
    NumericGreaterThanEquals,
    Bool,
    IpAddress,
    Null,
}

/// What a policy says of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// A statement denies it: refused, whoever asks.
    Deny,
    /// A statement allows it (and none denies it).
    Allow,
    /// No statement speaks of it: the owner and the ACLs decide.
    Default,
}

/// A request as a policy sees it.
#[derive(Debug, Clone, Default)]
pub struct Request<'a> {
    /// The signer's uid (`None`: anonymous).
    pub user: Option<&'a str>,
    /// The action, `s3:GetObject` and the like.
    pub action: &'a str,
    /// `arn:aws:s3:::<bucket>` or `arn:aws:s3:::<bucket>/<key>`.
    pub resource: String,
    /// Condition keys of the request (lower case) and their values.
    pub context: BTreeMap<String, String>,
}

impl Request<'_> {
    fn value(&self, key: &str) -> Option<&str> {
        self.context
            .get(&key.to_ascii_lowercase())
            .map(String::as_str)
    }
}

fn malformed(msg: impl std::fmt::Display) -> S3Error {
    s3_error!(MalformedPolicy, "{msg}")
}

/// A string or a list of strings (`"s3:GetObject"` or `["a", "b"]`).
fn strings(v: &Value, what: &str) -> Result<Vec<String>, S3Error> {
    match v {
        Value::String(s) => Ok(vec![s.clone()]),
        Value::Array(items) if !items.is_empty() => items
            .iter()
            .map(|i| match i {
                Value::String(s) => Ok(s.clone()),
                Value::Bool(b) => Ok(b.to_string()),
                Value::Number(n) => Ok(n.to_string()),
                _ => Err(malformed(format!("{what}: a string or a list of strings"))),
            })
            .collect(),
        Value::Bool(b) => Ok(vec![b.to_string()]),
        Value::Number(n) => Ok(vec![n.to_string()]),
        _ => Err(malformed(format!("{what}: a string or a list of strings"))),
    }
}

/// The uid a principal names, if it names one of the gateway's users.
fn principal_uid(p: &str) -> Result<String, S3Error> {
    if let Some(rest) = p.strip_prefix("arn:aws:iam::") {
        // arn:aws:iam::<account>:user/<uid> or arn:aws:iam::<account>:root
        let (account, what) = rest
            .split_once(':')
            .ok_or_else(|| malformed(format!("Invalid principal in policy: {p:?}")))?;
        if let Some(uid) = what.strip_prefix("user/")
            && !uid.is_empty()
        {
            return Ok(uid.to_string());
        }
        if what == "root" && !account.is_empty() {
            return Ok(account.to_string());
        }
        return Err(malformed(format!("Invalid principal in policy: {p:?}")));
    }
    if p.is_empty() || p.contains(':') || p.contains('/') {
        return Err(malformed(format!("Invalid principal in policy: {p:?}")));
    }
    Ok(p.to_string())
}

fn principals(v: &Value) -> Result<Option<Vec<String>>, S3Error> {
    match v {
        Value::String(s) if s == "*" => Ok(None),
        Value::Object(m) => {
            let mut uids = Vec::new();
            for (k, v) in m {
                if k != "AWS" {
                    return Err(malformed(format!(
                        "Invalid principal in policy: {k:?} (only \"AWS\" principals)"
                    )));
                }
                for p in strings(v, "Principal")? {
                    if p == "*" {
                        return Ok(None);
                    }
                    uids.push(principal_uid(&p)?);
                }
            }
            if uids.is_empty() {
                return Err(malformed("Invalid principal in policy: none named"));
            }
            Ok(Some(uids))
        }
        _ => Err(malformed("Invalid principal in policy")),
    }
}

const KNOWN_KEYS: [&str; 11] = [
    "aws:sourceip",
    "aws:securetransport",
    "aws:username",
    "aws:userid",
    "aws:referer",
    "aws:useragent",
    "s3:prefix",
    "s3:delimiter",
    "s3:max-keys",
    "s3:versionid",
    "s3:x-amz-acl",
];

fn operator(name: &str) -> Result<(Operator, bool, bool), S3Error> {
    let (base, if_exists) = match name.strip_suffix("IfExists") {
        Some(b) => (b, true),
        None => (name, false),
    };
    let (op, negated) = match base {
        "StringEquals" => (Operator::StringEquals, false),
        "StringNotEquals" => (Operator::StringEquals, true),
        "StringEqualsIgnoreCase" => (Operator::StringEqualsIgnoreCase, false),
        "StringNotEqualsIgnoreCase" => (Operator::StringEqualsIgnoreCase, true),
        "StringLike" => (Operator::StringLike, false),
        "StringNotLike" => (Operator::StringLike, true),
        "NumericEquals" => (Operator::NumericEquals, false),
        "NumericNotEquals" => (Operator::NumericEquals, true),
        "NumericLessThan" => (Operator::NumericLessThan, false),
        "NumericLessThanEquals" => (Operator::NumericLessThanEquals, false),
        "NumericGreaterThan" => (Operator::NumericGreaterThan, false),
        "NumericGreaterThanEquals" => (Operator::NumericGreaterThanEquals, false),
        "Bool" => (Operator::Bool, false),
        "IpAddress" => (Operator::IpAddress, false),
        "NotIpAddress" => (Operator::IpAddress, true),
        "Null" if !if_exists => (Operator::Null, false),
        _ => {
            return Err(malformed(format!(
                "Invalid Condition type: {name:?} is not a condition operator the gateway evaluates"
            )));
        }
    };
    Ok((op, negated, if_exists))
}

fn conditions(v: &Value) -> Result<Vec<Condition>, S3Error> {
    let Value::Object(ops) = v else {
        return Err(malformed("Condition: an object of operators"));
    };
    let mut out = Vec::new();
    for (name, keys) in ops {
        let (op, negated, if_exists) = operator(name)?;
        let Value::Object(keys) = keys else {
            return Err(malformed(format!("Condition {name}: an object of keys")));
        };
        for (key, values) in keys {
            let lower = key.to_ascii_lowercase();
            let known = KNOWN_KEYS.contains(&lower.as_str())
                || ["s3:existingobjecttag/", "s3:requestobjecttag/", "s3:x-amz-"]
                    .iter()
                    .any(|p| lower.strip_prefix(p).is_some_and(|t| !t.is_empty()));
            if !known {
                return Err(malformed(format!(
                    "Policy has an invalid condition key: {key:?}"
                )));
            }
            let values = strings(values, &format!("Condition {name} {key}"))?;
            for v in &values {
                let ok = match op {
                    Operator::IpAddress => cidr(v).is_some(),
                    Operator::Bool | Operator::Null => {
                        v.eq_ignore_ascii_case("true") || v.eq_ignore_ascii_case("false")
                    }
                    Operator::NumericEquals
                    | Operator::NumericLessThan
                    | Operator::NumericLessThanEquals
                    | Operator::NumericGreaterThan
                    | Operator::NumericGreaterThanEquals => v.parse::<f64>().is_ok(),
                    _ => true,
                };
                if !ok {
                    return Err(malformed(format!(
                        "Condition {name} {key}: {v:?} is not a valid value"
                    )));
                }
            }
            out.push(Condition {
                op,
                negated,
                if_exists,
                key: lower,
                values,
            });
        }
    }
    Ok(out)
}

/// Policies parsed, by (bucket, document): a bucket's policy is parsed
/// once, not on each of its requests. A changed document is another key;
/// the map is emptied when it reaches [`PARSED_MAX`] entries.
static PARSED: std::sync::OnceLock<std::sync::Mutex<Parsed>> = std::sync::OnceLock::new();
type Parsed = std::collections::HashMap<(String, String), std::sync::Arc<Policy>>;
const PARSED_MAX: usize = 1024;

impl Policy {
    /// [`Policy::parse`], from the process's cache of parsed policies.
    pub fn cached(doc: &str, bucket: &str) -> Result<std::sync::Arc<Policy>, S3Error> {
        let map = PARSED.get_or_init(Default::default);
        let key = (bucket.to_string(), doc.to_string());
        {
            let m = map.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(p) = m.get(&key) {
                return Ok(std::sync::Arc::clone(p));
            }
        }
        let p = std::sync::Arc::new(Policy::parse(doc, bucket)?);
        let mut m = map.lock().unwrap_or_else(|p| p.into_inner());
        if m.len() >= PARSED_MAX {
            m.clear();
        }
        m.insert(key, std::sync::Arc::clone(&p));
        Ok(p)
    }

    /// The policy `doc` sets on bucket `bucket`, if it is one AWS would
    /// take: otherwise `MalformedPolicy`, saying what is wrong.
    pub fn parse(doc: &str, bucket: &str) -> Result<Policy, S3Error> {
        if doc.len() > POLICY_BYTES_MAX {
            return Err(malformed(format!(
                "Policies must be no more than {POLICY_BYTES_MAX} bytes"
            )));
        }
        let v: Value = serde_json::from_str(doc)
            .map_err(|e| malformed(format!("This policy contains invalid Json: {e}")))?;
        let Value::Object(top) = v else {
            return Err(malformed(
                "This policy contains invalid Json: not an object",
            ));
        };
        for k in top.keys() {
            if !matches!(k.as_str(), "Version" | "Id" | "Statement") {
                return Err(malformed(format!("Unknown field {k}")));
            }
        }
        match top.get("Version") {
            None => {}
            Some(Value::String(v)) if v == "2012-10-17" || v == "2008-10-17" => {}
            Some(v) => return Err(malformed(format!("Invalid policy version {v}"))),
        }
        let stmts = match top.get("Statement") {
            Some(Value::Array(a)) if !a.is_empty() => a.clone(),
            Some(o @ Value::Object(_)) => vec![o.clone()],
            _ => return Err(malformed("Missing required field Statement")),
        };
        let mut statements = Vec::new();
        for s in &stmts {
            statements.push(statement(s, bucket)?);
        }
        Ok(Policy { statements })
    }

    /// What the policy says of `req`.
    pub fn evaluate(&self, req: &Request<'_>) -> Decision {
        let mut allowed = false;
        for s in &self.statements {
            if s.matches(req) {
                if !s.allow {
                    return Decision::Deny;
                }
                allowed = true;
            }
        }
        if allowed {
            Decision::Allow
        } else {
            Decision::Default
        }
    }

    /// Whether evaluating needs the object's tags (a condition on
    /// `s3:ExistingObjectTag/…`).
    pub fn needs_object_tags(&self) -> bool {
        self.statements.iter().any(|s| {
            s.conditions
                .iter()
                .any(|c| c.key.starts_with("s3:existingobjecttag/"))
        })
    }

    /// Whether the policy lets anyone at all (`*`) do something: a public
    /// policy, in the sense of a public-access block.
    pub fn is_public(&self) -> bool {
        self.statements
            .iter()
            .any(|s| s.allow && s.principals.is_none() && s.conditions.is_empty())
    }
}

fn statement(v: &Value, bucket: &str) -> Result<Statement, S3Error> {
    let Value::Object(m) = v else {
        return Err(malformed("a Statement is an object"));
    };
    for k in m.keys() {
        if !matches!(
            k.as_str(),
            "Sid"
                | "Effect"
                | "Principal"
                | "Action"
                | "NotAction"
                | "Resource"
                | "NotResource"
                | "Condition"
        ) {
            return Err(malformed(format!(
                "Unknown field {k} (NotPrincipal is not supported)"
            )));
        }
    }
    let allow = match m.get("Effect") {
        Some(Value::String(e)) if e == "Allow" => true,
        Some(Value::String(e)) if e == "Deny" => false,
        _ => return Err(malformed("Effect must be Allow or Deny")),
    };
    let principals = principals(
        m.get("Principal")
            .ok_or_else(|| malformed("Missing required field Principal"))?,
    )?;
    let (actions, not_action) = match (m.get("Action"), m.get("NotAction")) {
        (Some(a), None) => (strings(a, "Action")?, false),
        (None, Some(a)) => (strings(a, "NotAction")?, true),
        _ => return Err(malformed("a Statement needs Action or NotAction (one)")),
    };
    for a in &actions {
        let known = a == "*"
            || a.strip_prefix("s3:").is_some_and(|r| {
                !r.is_empty()
                    && r.chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '*' || c == '?')
            });
        if !known {
            return Err(malformed(format!("Policy has invalid action: {a:?}")));
        }
    }
    let (resources, not_resource) = match (m.get("Resource"), m.get("NotResource")) {
        (Some(r), None) => (strings(r, "Resource")?, false),
        (None, Some(r)) => (strings(r, "NotResource")?, true),
        _ => return Err(malformed("a Statement needs Resource or NotResource (one)")),
    };
    for r in &resources {
        // A bucket's policy speaks of the bucket and its objects only.
        let ours = r.strip_prefix("arn:aws:s3:::").is_some_and(|p| {
            let b = p.split('/').next().unwrap_or("");
            b == bucket || (b.contains(['*', '?']) && like(b, bucket))
        });
        if !ours {
            return Err(malformed(format!(
                "Policy has invalid resource: {r:?} (arn:aws:s3:::{bucket} or arn:aws:s3:::{bucket}/...)"
            )));
        }
    }
    let conditions = match m.get("Condition") {
        Some(c) => conditions(c)?,
        None => Vec::new(),
    };
    Ok(Statement {
        allow,
        principals,
        actions,
        not_action,
        resources,
        not_resource,
        conditions,
    })
}

impl Statement {
    fn matches(&self, req: &Request<'_>) -> bool {
        let principal = match (&self.principals, req.user) {
            (None, _) => true,
            (Some(uids), Some(u)) => uids.iter().any(|p| p == u),
            (Some(_), None) => false,
        };
        let action =
            self.actions.iter().any(|a| like_ignore_case(a, req.action)) != self.not_action;
        let resource = self.resources.iter().any(|r| like(r, &req.resource)) != self.not_resource;
        principal && action && resource && self.conditions.iter().all(|c| c.holds(req))
    }
}

impl Condition {
    fn holds(&self, req: &Request<'_>) -> bool {
        let Some(got) = req.value(&self.key) else {
            return match self.op {
                // Null: true when the key is absent, as the value says.
                Operator::Null => self.values.iter().any(|v| v.eq_ignore_ascii_case("true")),
                _ => self.if_exists || self.negated,
            };
        };
        let any = self.values.iter().any(|want| match self.op {
            Operator::StringEquals => got == want,
            Operator::StringEqualsIgnoreCase => got.eq_ignore_ascii_case(want),
            Operator::StringLike => like(want, got),
            Operator::Bool => got.eq_ignore_ascii_case(want),
            Operator::Null => want.eq_ignore_ascii_case("false"),
            Operator::IpAddress => match (got.parse::<IpAddr>(), cidr(want)) {
                (Ok(ip), Some(net)) => in_net(ip, net),
                _ => false,
            },
            num => match (got.parse::<f64>(), want.parse::<f64>()) {
                (Ok(g), Ok(w)) => match num {
                    Operator::NumericEquals => g == w,
                    Operator::NumericLessThan => g < w,
                    Operator::NumericLessThanEquals => g <= w,
                    Operator::NumericGreaterThan => g > w,
                    _ => g >= w,
                },
                _ => false,
            },
        });
        any != self.negated
    }
}

/// `addr/bits` (or an address alone: all its bits).
fn cidr(s: &str) -> Option<(IpAddr, u8)> {
    let (a, bits) = match s.split_once('/') {
        Some((a, b)) => (a, Some(b.parse::<u8>().ok()?)),
        None => (s, None),
    };
    let ip: IpAddr = a.parse().ok()?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let bits = bits.unwrap_or(max);
    (bits <= max).then_some((ip, bits))
}

fn in_net(ip: IpAddr, (net, bits): (IpAddr, u8)) -> bool {
    let (ip, net, width) = match (ip, net) {
        (IpAddr::V4(i), IpAddr::V4(n)) => (u128::from(u32::from(i)), u128::from(u32::from(n)), 32),
        (IpAddr::V6(i), IpAddr::V6(n)) => (u128::from(i), u128::from(n), 128),
        (IpAddr::V6(i), IpAddr::V4(n)) => match i.to_ipv4_mapped() {
            Some(i) => (u128::from(u32::from(i)), u128::from(u32::from(n)), 32),
            None => return false,
        },
        _ => return false,
    };
    if bits == 0 {
        return true;
    }
    let shift = width - u32::from(bits);
    (ip >> shift) == (net >> shift)
}

/// Whether `s` matches `pattern`, where `*` is any run of characters and
/// `?` any one.
pub fn like(pattern: &str, s: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = s.chars().collect();
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

fn like_ignore_case(pattern: &str, s: &str) -> bool {
    like(&pattern.to_ascii_lowercase(), &s.to_ascii_lowercase())
}

/// The policy action of S3 operation `op` (s3s's name for it); `versioned`
/// when the request names a version.
pub fn action_of(op: &str, versioned: bool) -> String {
    let a = match (op, versioned) {
        ("GetObject" | "HeadObject" | "GetObjectAttributes", false) => "GetObject",
        ("GetObject" | "HeadObject" | "GetObjectAttributes", true) => "GetObjectVersion",
        ("DeleteObject", true) => "DeleteObjectVersion",
        ("GetObjectTagging", true) => "GetObjectVersionTagging",
        ("PutObjectTagging", true) => "PutObjectVersionTagging",
        ("DeleteObjectTagging", true) => "DeleteObjectVersionTagging",
        ("GetObjectAcl", true) => "GetObjectVersionAcl",
        ("PutObjectAcl", true) => "PutObjectVersionAcl",
        (
            "PutObject"
            | "CopyObject"
            | "CreateMultipartUpload"
            | "UploadPart"
            | "UploadPartCopy"
            | "CompleteMultipartUpload",
            _,
        ) => "PutObject",
        ("ListObjects" | "ListObjectsV2" | "HeadBucket", _) => "ListBucket",
        ("ListObjectVersions", _) => "ListBucketVersions",
        ("ListMultipartUploads", _) => "ListBucketMultipartUploads",
        ("ListParts", _) => "ListMultipartUploadParts",
        ("DeleteObjects", _) => "DeleteObject",
        ("DeleteBucketTagging", _) => "PutBucketTagging",
        ("GetPublicAccessBlock", _) => "GetBucketPublicAccessBlock",
        ("PutPublicAccessBlock" | "DeletePublicAccessBlock", _) => "PutBucketPublicAccessBlock",
        (op, _) => op,
    };
    format!("s3:{a}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use s3s::S3ErrorCode;

    fn req<'a>(user: Option<&'a str>, action: &'a str, resource: &str) -> Request<'a> {
        Request {
            user,
            action,
            resource: format!("arn:aws:s3:::{resource}"),
            context: BTreeMap::new(),
        }
    }

    fn with<'a>(mut r: Request<'a>, k: &str, v: &str) -> Request<'a> {
        r.context.insert(k.to_ascii_lowercase(), v.to_string());
        r
    }

    #[test]
    fn anonymous_reads_one_prefix_and_not_another() {
        let p = Policy::parse(
            r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":"*",
               "Action":"s3:GetObject","Resource":"arn:aws:s3:::b/public/*"}]}"#,
            "b",
        )
        .expect("valid");
        assert_eq!(
            p.evaluate(&req(None, "s3:GetObject", "b/public/x")),
            Decision::Allow
        );
        assert_eq!(
            p.evaluate(&req(None, "s3:GetObject", "b/private/x")),
            Decision::Default
        );
        assert_eq!(
            p.evaluate(&req(None, "s3:PutObject", "b/public/x")),
            Decision::Default
        );
        assert!(p.is_public());
    }

    #[test]
    fn an_explicit_deny_beats_an_allow() {
        let p = Policy::parse(
            r#"{"Statement":[
                {"Effect":"Allow","Principal":{"AWS":["arn:aws:iam:::user/bob"]},
                 "Action":"s3:*","Resource":["arn:aws:s3:::b","arn:aws:s3:::b/*"]},
                {"Effect":"Deny","Principal":{"AWS":"*"},"Action":"s3:Delete*",
                 "Resource":"arn:aws:s3:::b/*"}]}"#,
            "b",
        )
        .expect("valid");
        assert_eq!(
            p.evaluate(&req(Some("bob"), "s3:GetObject", "b/k")),
            Decision::Allow
        );
        assert_eq!(
            p.evaluate(&req(Some("bob"), "s3:ListBucket", "b")),
            Decision::Allow
        );
        assert_eq!(
            p.evaluate(&req(Some("bob"), "s3:DeleteObject", "b/k")),
            Decision::Deny
        );
        assert_eq!(
            p.evaluate(&req(Some("eve"), "s3:GetObject", "b/k")),
            Decision::Default
        );
        assert_eq!(
            p.evaluate(&req(None, "s3:DeleteObject", "b/k")),
            Decision::Deny
        );
        assert!(!p.is_public());
    }

    #[test]
    fn conditions_on_the_source_address_prefix_transport_and_tags() {
        let p = Policy::parse(
            r#"{"Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:GetObject",
                "Resource":"arn:aws:s3:::b/*",
                "Condition":{"IpAddress":{"aws:SourceIp":["127.0.0.0/8","10.1.2.3"]},
                             "Bool":{"aws:SecureTransport":"false"}}}]}"#,
            "b",
        )
        .expect("valid");
        let r = |ip: &str, tls: &str| {
            with(
                with(req(None, "s3:GetObject", "b/k"), "aws:SourceIp", ip),
                "aws:SecureTransport",
                tls,
            )
        };
        assert_eq!(p.evaluate(&r("127.0.0.9", "false")), Decision::Allow);
        assert_eq!(p.evaluate(&r("10.1.2.3", "false")), Decision::Allow);
        assert_eq!(p.evaluate(&r("10.1.2.4", "false")), Decision::Default);
        assert_eq!(p.evaluate(&r("127.0.0.9", "true")), Decision::Default);
        assert_eq!(p.evaluate(&r("::ffff:127.0.0.1", "false")), Decision::Allow);

        let p = Policy::parse(
            r#"{"Statement":[{"Effect":"Deny","Principal":"*","Action":"s3:ListBucket",
                "Resource":"arn:aws:s3:::b","Condition":{"StringNotLike":{"s3:prefix":"home/*"}}},
               {"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::b/*",
                "Condition":{"StringEquals":{"s3:ExistingObjectTag/security":"public"}}}]}"#,
            "b",
        )
        .expect("valid");
        assert!(p.needs_object_tags());
        let list = |prefix: Option<&str>| {
            let r = req(None, "s3:ListBucket", "b");
            match prefix {
                Some(x) => with(r, "s3:prefix", x),
                None => r,
            }
        };
        assert_eq!(p.evaluate(&list(Some("home/a"))), Decision::Default);
        assert_eq!(p.evaluate(&list(Some("etc/"))), Decision::Deny);
        // An absent key: a negated operator holds.
        assert_eq!(p.evaluate(&list(None)), Decision::Deny);
        let get = |tag: Option<&str>| {
            let r = req(None, "s3:GetObject", "b/k");
            match tag {
                Some(t) => with(r, "s3:ExistingObjectTag/security", t),
                None => r,
            }
        };
        assert_eq!(p.evaluate(&get(Some("public"))), Decision::Allow);
        assert_eq!(p.evaluate(&get(Some("secret"))), Decision::Default);
        assert_eq!(p.evaluate(&get(None)), Decision::Default);
    }

    #[test]
    fn malformed_documents_are_refused() {
        let stmt = |s: &str| format!(r#"{{"Version":"2012-10-17","Statement":[{s}]}}"#);
        let ok = r#"{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::b/*"}"#;
        assert!(Policy::parse(&stmt(ok), "b").is_ok());
        for bad in [
            "not json".to_string(),
            "[]".to_string(),
            r#"{"Version":"2012-10-17"}"#.to_string(),
            r#"{"Version":"1999-01-01","Statement":[]}"#.to_string(),
            stmt(
                r#"{"Effect":"Maybe","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::b/*"}"#,
            ),
            stmt(r#"{"Effect":"Allow","Action":"s3:GetObject","Resource":"arn:aws:s3:::b/*"}"#),
            stmt(r#"{"Effect":"Allow","Principal":"*","Resource":"arn:aws:s3:::b/*"}"#),
            stmt(
                r#"{"Effect":"Allow","Principal":"*","Action":"ec2:RunInstances","Resource":"arn:aws:s3:::b/*"}"#,
            ),
            stmt(
                r#"{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::other/*"}"#,
            ),
            stmt(r#"{"Effect":"Allow","Principal":"*","Action":"s3:GetObject"}"#),
            stmt(
                r#"{"Effect":"Allow","Principal":{"Service":"x"},"Action":"s3:GetObject","Resource":"arn:aws:s3:::b/*"}"#,
            ),
            stmt(
                r#"{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::b/*","Condition":{"Frobnicate":{"aws:SourceIp":"1.2.3.4"}}}"#,
            ),
            stmt(
                r#"{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::b/*","Condition":{"IpAddress":{"aws:SourceIp":"1.2.3.4/40"}}}"#,
            ),
            stmt(
                r#"{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::b/*","Condition":{"StringEquals":{"aws:Frobnicate":"x"}}}"#,
            ),
            stmt(
                r#"{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::b/*","Extra":1}"#,
            ),
            format!(
                r#"{{"Statement":[{ok}],"Padding":"{}"}}"#,
                "x".repeat(POLICY_BYTES_MAX)
            ),
        ] {
            let e = Policy::parse(&bad, "b").expect_err(&bad);
            assert_eq!(*e.code(), S3ErrorCode::MalformedPolicy, "{bad}");
        }
    }

    #[test]
    fn wildcards_and_actions() {
        assert!(like("b/*", "b/a/b"));
        assert!(like("b/a?c", "b/abc"));
        assert!(!like("b/a?c", "b/ac"));
        assert!(like("*", ""));
        assert!(!like("b/x*", "b/y"));
        assert!(like_ignore_case("s3:get*", "s3:GetObject"));
        assert_eq!(action_of("HeadObject", false), "s3:GetObject");
        assert_eq!(action_of("GetObject", true), "s3:GetObjectVersion");
        assert_eq!(action_of("ListObjectsV2", false), "s3:ListBucket");
        assert_eq!(action_of("PutBucketPolicy", false), "s3:PutBucketPolicy");
    }
}
