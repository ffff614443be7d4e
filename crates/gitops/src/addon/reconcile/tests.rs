//! Unit tests of the addon controller's retry backoff.

#[test]
fn retries_back_off_from_5_s_to_5_min() {
    let d: Vec<u64> = (1..=9).map(|n| super::retry_delay(n).as_secs()).collect();
    assert_eq!(d, [5, 10, 20, 40, 80, 160, 300, 300, 300]);
}
