use super::*;

fn now() -> OffsetDateTime {
    OffsetDateTime::now_utc()
}

fn server_sans() -> Vec<String> {
    [
        "argocd-agent-principal.argocd.svc",
        "localhost",
        "127.0.0.1",
        "::1",
        "203.0.113.10",
    ]
    .map(String::from)
    .to_vec()
}

#[test]
fn ca_is_a_ca_named_like_the_peer_for_365_days() {
    let t = now();
    let ca = new_ca(t).unwrap();
    let i = parse(&ca.cert).unwrap();
    assert!(i.is_ca);
    assert_eq!(
        i.common_name,
        format!("argocd-agent-ca@{}", t.unix_timestamp())
    );
    assert_eq!((i.not_after - i.not_before).whole_days(), 365);
    assert!(
        ca.key.starts_with("-----BEGIN RSA PRIVATE KEY-----"),
        "PKCS#1 RSA: OCM's CSR signer reads no other CA key"
    );
    assert_eq!(ca_decision(Some(&ca), t), None);
    let ec = Pem {
        cert: ca.cert.clone(),
        key: KeyPair::generate().unwrap().serialize_pem(),
    };
    assert!(matches!(
        ca_decision(Some(&ec), t),
        Some(Reissue::Invalid(_))
    ));
    assert_eq!(ca_decision(None, t), Some(Reissue::Missing));
    assert_eq!(
        ca_decision(Some(&ca), t + Duration::days(293)),
        Some(Reissue::PastRenewal),
        "re-issued at 80 % of 365 days"
    );
    assert_eq!(
        ca_decision(Some(&ca), t + Duration::days(366)),
        Some(Reissue::Expired)
    );
}

#[test]
fn server_leaf_has_the_sans_server_auth_and_the_ca_in_its_chain() {
    let t = now();
    let ca = new_ca(t).unwrap();
    let leaf = issue(&ca, &Leaf::Server(server_sans()), t).unwrap();
    let chain = parse_all(&leaf.cert);
    assert_eq!(chain.len(), 2, "tls.crt = leaf + CA");
    let i = &chain[0];
    assert!(i.server_auth && !i.client_auth && !i.is_ca);
    assert!(i.dns.contains("argocd-agent-principal.argocd.svc") && i.dns.contains("localhost"));
    assert!(i.ips.contains(&"203.0.113.10".parse().unwrap()));
    assert!(i.ips.contains(&"::1".parse().unwrap()));
    assert_eq!(
        i.common_name, "127.0.0.1",
        "the smallest name, as library-go"
    );
    assert_eq!((i.not_after - i.not_before).whole_days(), 30);
    let ca_info = parse(&ca.cert).unwrap();
    assert!(signed_by(i, &ca_info));
    let want = Leaf::Server(server_sans());
    assert_eq!(
        leaf_decision(Some(&leaf), &want, std::slice::from_ref(&ca_info), t),
        None
    );
    let mut moved = server_sans();
    moved[4] = "198.51.100.7".into();
    assert_eq!(
        leaf_decision(
            Some(&leaf),
            &Leaf::Server(moved),
            std::slice::from_ref(&ca_info),
            t
        ),
        Some(Reissue::SansChanged),
        "a new advertised address re-issues the certificate"
    );
    assert_eq!(
        leaf_decision(Some(&leaf), &want, &[ca_info], t + Duration::days(25)),
        Some(Reissue::PastRenewal),
        "re-issued at 80 % of 30 days (day 24)"
    );
}

#[test]
fn client_leaf_is_cn_cluster_client_auth() {
    let t = now();
    let ca = new_ca(t).unwrap();
    let ca_info = parse(&ca.cert).unwrap();
    let leaf = issue(&ca, &Leaf::Client("c1".into()), t).unwrap();
    assert_eq!(parse_all(&leaf.cert).len(), 1, "leaf only");
    let i = parse(&leaf.cert).unwrap();
    assert_eq!(i.common_name, "c1");
    assert!(i.client_auth && !i.server_auth);
    let bundle = [ca_info];
    assert_eq!(
        leaf_decision(Some(&leaf), &Leaf::Client("c1".into()), &bundle, t),
        None
    );
    assert_eq!(
        leaf_decision(Some(&leaf), &Leaf::Client("c2".into()), &bundle, t),
        Some(Reissue::WrongSubject)
    );
    let server = issue(&ca, &Leaf::Server(server_sans()), t).unwrap();
    assert_eq!(
        leaf_decision(Some(&server), &Leaf::Client("c1".into()), &bundle, t),
        Some(Reissue::WrongUsage)
    );
}

#[test]
fn leaf_cannot_outlive_its_ca() {
    let t = now();
    let ca = new_ca(t - Duration::days(360)).unwrap();
    let leaf = issue(&ca, &Leaf::Client("c1".into()), t).unwrap();
    let (l, c) = (parse(&leaf.cert).unwrap(), parse(&ca.cert).unwrap());
    assert!(l.not_after < c.not_after);
}

#[test]
fn ca_rotation_keeps_old_leaves_through_the_grace_then_reissues() {
    let t = now();
    let old = new_ca(t - Duration::days(300)).unwrap();
    let leaf = issue(&old, &Leaf::Client("c1".into()), t - Duration::days(1)).unwrap();
    let new = new_ca(t).unwrap();
    let bundle_pem = ca_bundle(&new.cert, &ca_bundle(&old.cert, "", t), t);
    let bundle = parse_all(&bundle_pem);
    assert_eq!(bundle.len(), 2, "old and new CA shipped together");
    assert_eq!(
        bundle[0].der,
        parse(&new.cert).unwrap().der,
        "current first"
    );
    let want = Leaf::Client("c1".into());
    assert_eq!(
        leaf_decision(Some(&leaf), &want, &bundle, t),
        None,
        "in the grace"
    );
    assert_eq!(
        leaf_decision(Some(&leaf), &want, &bundle, t + ROTATION_GRACE),
        Some(Reissue::CaRotated)
    );
    // A leaf of a CA not in the bundle is never trusted.
    let stranger = new_ca(t).unwrap();
    let foreign = issue(&stranger, &want, t).unwrap();
    assert_eq!(
        leaf_decision(Some(&foreign), &want, &bundle, t),
        Some(Reissue::UntrustedIssuer)
    );
}

#[test]
fn bundle_dedups_and_drops_expired_cas() {
    let t = now();
    let expired = new_ca(t - Duration::days(400)).unwrap();
    let cur = new_ca(t).unwrap();
    let previous = format!("{}{}", cur.cert, expired.cert);
    let b = parse_all(&ca_bundle(&cur.cert, &previous, t));
    assert_eq!(b.len(), 1);
}

#[test]
fn invalid_material_is_reissued() {
    let t = now();
    let junk = Pem {
        cert: "not a cert".into(),
        key: "nope".into(),
    };
    assert!(matches!(
        ca_decision(Some(&junk), t),
        Some(Reissue::Invalid(_))
    ));
    assert!(matches!(
        leaf_decision(Some(&junk), &Leaf::Client("c".into()), &[], t),
        Some(Reissue::Invalid(_))
    ));
}
