//! The flags of `ctl pki …`: its subcommands and the key generation flags they share.

use anyhow::bail;

use argocd_pull_agent_core::pki::{DEFAULT_CA_DAYS, DEFAULT_LEAF_DAYS, KeyAlgorithm};

/// Key generation flags (peer: cmd/ctl/pki_flags.go `addKeyGenFlags`; defaults rsa, 4096).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct KeyFlags {
    /// Private key algorithm (rsa, ecdsa-p256, ecdsa-p384, ed25519) [default: rsa].
    #[arg(long = "key-algorithm")]
    pub algorithm: Option<String>,
    /// RSA key size in bits (2048, 3072, or 4096; ignored for non-RSA algorithms) [default: 4096].
    #[arg(long = "key-size")]
    pub size: Option<usize>,
}

impl KeyFlags {
    pub fn parse(&self) -> anyhow::Result<KeyAlgorithm> {
        KeyAlgorithm::parse(
            self.algorithm.as_deref().unwrap_or(DEFAULT_KEY_ALGORITHM),
            self.size.unwrap_or(DEFAULT_RSA_BITS),
        )
    }

    /// Fails when a key flag was given to a command that will not generate a key (peer:
    /// `rejectUnusedKeyGenFlags`).
    pub fn reject_unused(&self, context: &str) -> anyhow::Result<()> {
        if self.algorithm.is_some() || self.size.is_some() {
            bail!("--key-algorithm and --key-size {context}");
        }
        Ok(())
    }
}

/// The peer's `tlsutil.DefaultKeyAlgorithm` / `DefaultRSABits`.
pub const DEFAULT_KEY_ALGORITHM: &str = "rsa";
pub const DEFAULT_RSA_BITS: usize = 4096;

#[derive(clap::Subcommand, Debug, Clone)]
pub enum PkiCommand {
    /// Initialize the PKI: a CA in Secret argocd-agent-ca.
    Init {
        /// Force regeneration of the PKI if it exists.
        #[arg(short, long)]
        force: bool,
        /// Number of days the certificate is valid for.
        #[arg(long, default_value_t = DEFAULT_CA_DAYS)]
        days: u32,
        #[command(flatten)]
        key: KeyFlags,
    },
    /// Issue TLS certificates signed by the PKI's CA.
    #[command(subcommand, visible_alias = "new-cert")]
    Issue(IssueCommand),
    /// Inspect the configured PKI.
    Inspect {
        /// Output format (json, yaml or text).
        #[arg(short, long, default_value = "json")]
        output: String,
        /// Display the full certificates (issuer, serial, usages, PEM), not only the summary.
        #[arg(short, long)]
        full: bool,
    },
    /// Delete the configured PKI (the CA secret).
    Delete {
        /// Do not ask for confirmation (ours; the peer always asks).
        #[arg(long)]
        yes: bool,
    },
    /// Print PKI's CA data in PEM format to stdout.
    Dump {
        /// Print both, key and cert.
        #[arg(long)]
        all: bool,
        /// Print the private key.
        #[arg(long)]
        key: bool,
        /// Print the public certificate.
        #[arg(long)]
        cert: bool,
    },
    /// Propagate the PKI's CA certificate to the agent (Secret argocd-agent-ca, field ca.crt).
    Propagate {
        /// Replace the agent's CA secret if it exists.
        #[arg(short, long)]
        force: bool,
    },
}

#[derive(clap::Subcommand, Debug, Clone)]
pub enum IssueCommand {
    /// Issue the principal's gRPC server certificate (Secret argocd-agent-principal-tls).
    Principal {
        /// The IP addresses this certificate is valid for.
        #[arg(long = "ip", value_delimiter = ',', default_value = "127.0.0.1")]
        ips: Vec<String>,
        /// The DNS names this certificate is valid for.
        #[arg(long = "dns", value_delimiter = ',', default_value = "localhost")]
        dns: Vec<String>,
        /// Update an existing certificate.
        #[arg(short, long)]
        upsert: bool,
        /// Number of days the certificate is valid for.
        #[arg(long, default_value_t = DEFAULT_LEAF_DAYS)]
        days: u32,
        #[command(flatten)]
        key: KeyFlags,
    },
    /// Issue the resource proxy's certificate (Secret argocd-agent-resource-proxy-tls).
    ResourceProxy {
        /// The IP addresses this certificate is valid for.
        #[arg(long = "ip", value_delimiter = ',')]
        ips: Vec<String>,
        /// The DNS names this certificate is valid for.
        #[arg(long = "dns", value_delimiter = ',')]
        dns: Vec<String>,
        /// Whether to update an existing certificate if it exists.
        #[arg(short, long)]
        upsert: bool,
        /// Do not add SAN information to the certificate.
        #[arg(long = "no-san")]
        no_san: bool,
        /// Number of days the certificate is valid for.
        #[arg(long, default_value_t = DEFAULT_LEAF_DAYS)]
        days: u32,
        #[command(flatten)]
        key: KeyFlags,
    },
    /// Issue an agent's client certificate into the agent's cluster (Secret
    /// argocd-agent-client-tls) with the CA certificate (Secret argocd-agent-ca, field ca.crt).
    Agent {
        /// The agent's name (the certificate's CN).
        name: String,
        #[arg(short, long)]
        upsert: bool,
        #[arg(long, default_value_t = DEFAULT_LEAF_DAYS)]
        days: u32,
        /// Allow the PKI and the agent in the same kube context.
        #[arg(long = "same-context")]
        same_context: bool,
        #[command(flatten)]
        key: KeyFlags,
    },
}
