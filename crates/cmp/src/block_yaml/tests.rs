use super::*;

fn slow(text: &str) -> Result<Value, serde_saphyr::Error> {
    serde_saphyr::from_str_with_options(text, crate::source::yaml_options())
}

/// When this tier answers, serde-saphyr reads the same value (also in key order).
fn agrees(text: &str) -> bool {
    match parse_document(text, &crate::source::yaml_options()) {
        Some(v) => {
            let expected = slow(text).unwrap_or_else(|e| {
                panic!("fast tier accepted what serde-saphyr refuses ({e}):\n{text:?}")
            });
            assert_eq!(
                serde_json::to_string(&v).unwrap(),
                serde_json::to_string(&expected).unwrap(),
                "document:\n{text:?}"
            );
            true
        }
        None => false,
    }
}

const HANDLED: &[&str] = &[
    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  labels:\n    app.kubernetes.io/name: x\ndata:\n  k: v\n",
    "a:\n- 1\n- two\n-\n- - x\n  - y\n- k: v\n  l: w\nb: c\n",
    "a:\n  - name: x\n    image: nginx:1.25 # comment\n    args: []\n",
    "a: |\n  line1\n\n  line2\n\nb: 1\n",
    "a: |-\n  x\n  y\n\n\nb: 1\n",
    "a: |+\n  x\n\n\nb: 1\n",
    "a: >\n  folded\n  text\n\n  para\nb: >-\n  x\n  y\n",
    "a: >+\n  x\n\n",
    "a: | # comment\n    indented\n      more\n    back\n",
    "a: \"q \\\" \\\\ \\n \\t \\u00e9 # not a comment\" # comment\nb: 'it''s'\n",
    "\"quoted key\": 1\n'single': 2\n",
    "a: []\nb: {}\nc: ~\nd: null\ne:\nf: yes\ng: 0644\nh: 1.10\ni: -3\nj: /usr/bin\nk: --flag=x\nl: 3Mi\n",
    "a: x#y\nb: a:b\nc: http://h:80/p?q=1#f\n",
    "# only a comment\n",
    "\n",
    "  a: 1\n  b:\n    c: 2\n",
    "- a\n- b\n",
    "- a\n - b\n",
    "a:\n  - |\n    lit\n  - >-\n    f\n",
    "key: |\n  text\n  #not a comment\n# a comment\nnext: 1\n",
    "a: [1, two, \"3\", 'f''our', [], {}, [x y, -1], {k: v, l: [m]}, /p, 1.5] # c\nb: {cpu: 10m, memory: 32Mi}\nc: [ a ,b ]\n",
    "a: multi\n  line\n\n   plain\nb:\n- x\n  y\n- k: v\n    w\nc: Default is\n  \"quoted\" - [x] {y} &z *w !v |u >t %s @r `q' p#o\n",
    "a: 'it''s\n  a   \n\n  long one'\nb: \"esc\\\"aped \\\n  broken\\u00e9 \n  text\"\n",
    "description: 'APIVersion defines the versioned schema of this representation\n    of an object.'\n",
    "a: ü\nb: \"日本\"\n",
];

#[test]
fn the_subset_gives_serde_saphyrs_values() {
    for doc in HANDLED {
        assert!(agrees(doc), "expected the fast tier to read:\n{doc}");
    }
}

#[test]
fn everything_else_is_left_to_the_next_tier() {
    for doc in [
        "a: &x 1\nb: *x\n",
        "a: !!str 1\n",
        "a: 1\na: 2\n",
        "? a\n: 1\n",
        "80: http\n",
        "yes: 1\n",
        "a: [1, 2,]\n",
        "a: [1, [2]\n",
        "a: {b: c, b: d}\n",
        "a: [b: c]\n",
        "a: {b}\n",
        "a: [a, , b]\n",
        "a: {b:c}\n",
        "a: multi\n  line # comment\n",
        "a: multi # comment\n  line\n",
        "a: \"two\n  lines\" x\n",
        "a: \"\\\n\n  x\"\n",
        "a: |2\n   x\n",
        "a:\tb\n",
        "a: b: c\n",
        "a: \"x\" y\n",
        "a: |\n",
        "a: |\n  x",
        "%YAML 1.2\n---\na: 1\n",
        "a: 1\n...\n",
        "a: \"\\x41\"\n",
        "a: b\r\n",
        "just a scalar\n",
        "a: 1\n b: 2\n",
        "a: >\n  x\n    more\n  y\n",
        "a: |\n  x\n   \n  y\n",
        "a: >+\n  x\n\n ",
    ] {
        assert!(!agrees(doc), "expected a fallback for:\n{doc}");
    }
}

#[test]
fn corpus_documents_agree_and_mostly_take_this_tier() {
    let documents = crate::source::tests::corpus_yaml_documents();
    let all = documents.len();
    let fast = documents.iter().filter(|d| agrees(d)).count();
    assert!(fast * 10 >= all * 8, "{fast} of {all} corpus documents");
}

/// The benchmark's documents (kubectl-style output) all take this tier — the CMP's speed
/// depends on it.
#[test]
fn benchmark_documents_take_this_tier() {
    let text = super::bench_input::stream(30, 2097);
    let chunks = crate::source::yaml_chunks(&text);
    assert_eq!(chunks.len(), 30);
    for chunk in chunks {
        assert!(agrees(chunk.text), "{}", chunk.text);
    }
}

/// Random plain scalars made of the characters numbers, booleans and nulls are spelled
/// with, plus a few others: the typing is serde-saphyr's (YAML 1.1, legacy octal).
#[test]
fn plain_scalar_typing_agrees() {
    const ALPHABET: &[u8] = b"0123456789+-._~eExXoObBaAfFinINyYsSlLu:/^$ ";
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..20_000 {
        let len = 1 + (next() % 8) as usize;
        let scalar: String = (0..len)
            .map(|_| ALPHABET[(next() % ALPHABET.len() as u64) as usize] as char)
            .collect();
        agrees(&format!("a: {scalar}\nb:\n- {scalar}\nc: [{scalar}]\n"));
    }
    for word in [
        "0644",
        "-0644",
        "0x1F",
        "0o17",
        "0b101",
        "1_000",
        "+1",
        "-0",
        ".5",
        "1.",
        "1e3",
        "1E+3",
        "-.inf",
        ".NaN",
        "inf",
        "nan",
        "~",
        "1:20",
        "0.1.2",
        "1e999",
        "-1e999",
        "18446744073709551616",
        "-9223372036854775809",
        "0x_1F",
        "08",
        "0_8",
        "+0x1F",
        "1__0",
    ] {
        agrees(&format!("a: {word}\n"));
    }
}

/// Mutation fuzzing: small edits of valid documents, in YAML's significant characters.
/// Whatever this tier accepts must be exactly what serde-saphyr reads.
#[test]
fn mutated_documents_never_disagree() {
    const ALPHABET: &[u8] = b" \n-:#|>+\"'\\{}[]a1.~&*!\t?,%yn0e_/u";
    let mut state = std::env::var("ARGOCD_PULL_FUZZ_SEED")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0x9e37_79b9_7f4a_7c15_u64)
        | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    // ARGOCD_PULL_FUZZ_ITERATIONS and ARGOCD_PULL_FUZZ_SEED make deeper runs
    let iterations = std::env::var("ARGOCD_PULL_FUZZ_ITERATIONS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(20_000);
    let mut accepted = 0;
    for _ in 0..iterations {
        let seed = HANDLED[(next() % HANDLED.len() as u64) as usize];
        let mut bytes = seed.as_bytes().to_vec();
        for _ in 0..=(next() % 3) {
            let at = (next() % (bytes.len() as u64 + 1)) as usize;
            let c = ALPHABET[(next() % ALPHABET.len() as u64) as usize];
            match next() % 3 {
                0 => bytes.insert(at, c),
                1 if at < bytes.len() => bytes[at] = c,
                _ if at < bytes.len() => {
                    bytes.remove(at);
                }
                _ => bytes.push(c),
            }
        }
        if let Ok(text) = String::from_utf8(bytes) {
            accepted += usize::from(agrees(&text));
        }
    }
    assert!(
        accepted > iterations / 4,
        "the fuzzer exercised the fast tier ({accepted})"
    );
}
