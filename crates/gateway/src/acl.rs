//! Access control lists beyond the canned ones: grants of READ, WRITE,
//! READ_ACP, WRITE_ACP or FULL_CONTROL to a named user (by id or by the
//! e-mail address of its record) or to the AllUsers and
//! AuthenticatedUsers groups, as `x-amz-grant-*` headers or an
//! AccessControlPolicy give them. A bucket or an object keeps either a
//! canned ACL (whose grants are implied) or, given grants, exactly those
//! ([`CUSTOM`]); what a requester may do is what they grant it (the
//! owner may do anything).

use hyper::http::HeaderMap;
use s3s::{S3Error, s3_error};
use serde::{Deserialize, Serialize};

/// The canned ACL of a bucket or an object whose ACL is exactly its
/// grants (none implied, not even its owner's).
pub const CUSTOM: &str = "custom";

/// The group of everyone, signed or not.
pub const ALL_USERS: &str = "http://acs.amazonaws.com/groups/global/AllUsers";
/// The group of every signed request.
pub const AUTHENTICATED_USERS: &str = "http://acs.amazonaws.com/groups/global/AuthenticatedUsers";

/// Whom a grant names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Grantee {
    /// A gateway user, by uid.
    User(String),
    /// Everyone.
    AllUsers,
    /// Every signed request.
    AuthenticatedUsers,
}

/// What a grant allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Perm {
    /// Read (objects) or list (buckets).
    Read,
    /// Write objects into a bucket.
    Write,
    /// Read the ACL.
    ReadAcp,
    /// Change the ACL.
    WriteAcp,
    /// All of them.
    FullControl,
}

impl Perm {
    /// S3's name for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Perm::Read => "READ",
            Perm::Write => "WRITE",
            Perm::ReadAcp => "READ_ACP",
            Perm::WriteAcp => "WRITE_ACP",
            Perm::FullControl => "FULL_CONTROL",
        }
    }

    /// The permission S3 names `s`.
    pub fn parse(s: &str) -> Option<Perm> {
        [
            Perm::Read,
            Perm::Write,
            Perm::ReadAcp,
            Perm::WriteAcp,
            Perm::FullControl,
        ]
        .into_iter()
        .find(|p| p.as_str() == s)
    }

    fn covers(self, want: Perm) -> bool {
        self == want || self == Perm::FullControl
    }
}

/// One grant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AclGrant {
    /// Whom.
    pub grantee: Grantee,
    /// What.
    pub permission: Perm,
}

/// A grantee as a request names it, before it is looked up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Named {
    /// `id="..."`: a uid.
    Id(String),
    /// `emailAddress="..."`: a user's e-mail address.
    Email(String),
    /// `uri="..."`: a group.
    Uri(String),
}

/// The group grants canned ACL `acl` stands for (its owner's full
/// control is implied; the `bucket-owner-*` ones are the caller's).
pub fn canned_grants(acl: &str) -> Vec<AclGrant> {
    let g = |grantee, permission| AclGrant {
        grantee,
        permission,
    };
    match acl {
        "public-read" => vec![g(Grantee::AllUsers, Perm::Read)],
        "public-read-write" => vec![
            g(Grantee::AllUsers, Perm::Read),
            g(Grantee::AllUsers, Perm::Write),
        ],
        "authenticated-read" => vec![g(Grantee::AuthenticatedUsers, Perm::Read)],
        _ => Vec::new(),
    }
}

/// Whether canned ACL `acl` and `grants` allow `perm` to `user` (uid;
/// `None`: anonymous). With `ignore_public`, grants to the groups count
/// for nothing (a public access block's IgnorePublicAcls).
pub fn allows(
    acl: &str,
    grants: &[AclGrant],
    ignore_public: bool,
    user: Option<&str>,
    perm: Perm,
) -> bool {
    canned_grants(acl).iter().chain(grants).any(|g| {
        let whom = match &g.grantee {
            Grantee::User(uid) => user == Some(uid.as_str()),
            Grantee::AllUsers => !ignore_public,
            Grantee::AuthenticatedUsers => !ignore_public && user.is_some(),
        };
        whom && g.permission.covers(perm)
    })
}

/// Whether canned ACL `acl` or `grants` grant anything to a group.
pub fn is_public(acl: &str, grants: &[AclGrant]) -> bool {
    canned_grants(acl)
        .iter()
        .chain(grants)
        .any(|g| !matches!(g.grantee, Grantee::User(_)))
}

/// The group a grant's `uri` names.
pub fn group(uri: &str) -> Result<Grantee, S3Error> {
    match uri {
        ALL_USERS => Ok(Grantee::AllUsers),
        AUTHENTICATED_USERS => Ok(Grantee::AuthenticatedUsers),
        other => Err(s3_error!(
            InvalidArgument,
            "Invalid group uri {other:?}: AllUsers or AuthenticatedUsers"
        )),
    }
}

/// The grants a request's `x-amz-grant-*` headers give (none: it gives
/// none), each `id="…"`, `emailAddress="…"` or `uri="…"`, comma-separated.
pub fn from_headers(headers: &HeaderMap) -> Result<Option<Vec<(Named, Perm)>>, S3Error> {
    let mut out = Vec::new();
    let mut any = false;
    for (name, perm) in [
        ("x-amz-grant-read", Perm::Read),
        ("x-amz-grant-write", Perm::Write),
        ("x-amz-grant-read-acp", Perm::ReadAcp),
        ("x-amz-grant-write-acp", Perm::WriteAcp),
        ("x-amz-grant-full-control", Perm::FullControl),
    ] {
        for v in headers.get_all(name) {
            any = true;
            let v = v
                .to_str()
                .map_err(|_| s3_error!(InvalidArgument, "{name} is not text"))?;
            for part in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                out.push((named(part, name)?, perm));
            }
        }
    }
    Ok(any.then_some(out))
}

fn named(part: &str, header: &str) -> Result<Named, S3Error> {
    let bad = || {
        s3_error!(
            InvalidArgument,
            "{header}: {part:?} is not id=\"…\", emailAddress=\"…\" or uri=\"…\""
        )
    };
    let (k, v) = part.split_once('=').ok_or_else(bad)?;
    let v = v.trim().trim_matches('"').to_string();
    if v.is_empty() {
        return Err(bad());
    }
    match k.trim().to_ascii_lowercase().as_str() {
        "id" => Ok(Named::Id(v)),
        "emailaddress" => Ok(Named::Email(v)),
        "uri" => Ok(Named::Uri(v)),
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(grantee: Grantee, permission: Perm) -> AclGrant {
        AclGrant {
            grantee,
            permission,
        }
    }

    #[test]
    fn grants_allow_what_they_name_to_whom_they_name() {
        let g = [
            grant(Grantee::User("bob".into()), Perm::Read),
            grant(Grantee::User("carol".into()), Perm::FullControl),
        ];
        assert!(allows("private", &g, false, Some("bob"), Perm::Read));
        assert!(!allows("private", &g, false, Some("bob"), Perm::Write));
        assert!(allows("private", &g, false, Some("carol"), Perm::WriteAcp));
        assert!(!allows("private", &g, false, Some("eve"), Perm::Read));
        assert!(!allows("private", &g, false, None, Perm::Read));
        assert!(!is_public("private", &g));
        // Canned and given grants add up; IgnorePublicAcls drops the groups'.
        assert!(allows("public-read", &g, false, None, Perm::Read));
        assert!(!allows("public-read", &g, true, None, Perm::Read));
        assert!(allows("public-read", &g, true, Some("bob"), Perm::Read));
        assert!(allows(
            "authenticated-read",
            &[],
            false,
            Some("eve"),
            Perm::Read
        ));
        assert!(!allows("authenticated-read", &[], false, None, Perm::Read));
        let auth = [grant(Grantee::AuthenticatedUsers, Perm::Write)];
        assert!(is_public("private", &auth));
        assert!(allows("private", &auth, false, Some("eve"), Perm::Write));
    }

    #[test]
    fn grant_headers_are_parsed_or_refused() {
        let mut h = HeaderMap::new();
        assert_eq!(from_headers(&h).expect("none"), None);
        h.insert(
            "x-amz-grant-read",
            r#"id="bob", emailAddress="c@example.com""#.parse().expect("header"),
        );
        h.insert(
            "x-amz-grant-full-control",
            format!("uri=\"{ALL_USERS}\"").parse().expect("header"),
        );
        let got = from_headers(&h).expect("parsed").expect("some");
        assert_eq!(
            got,
            vec![
                (Named::Id("bob".into()), Perm::Read),
                (Named::Email("c@example.com".into()), Perm::Read),
                (Named::Uri(ALL_USERS.into()), Perm::FullControl),
            ]
        );
        for bad in ["bob", "id=", "name=\"x\""] {
            let mut h = HeaderMap::new();
            h.insert("x-amz-grant-write", bad.parse().expect("header"));
            assert!(from_headers(&h).is_err(), "{bad}");
        }
        assert!(group("http://example.com/group").is_err());
        assert_eq!(Perm::parse("READ_ACP"), Some(Perm::ReadAcp));
        assert_eq!(Perm::parse("ALL"), None);
    }
}
