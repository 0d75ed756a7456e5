//! How to reach a Kafka cluster: bootstrap servers plus any librdkafka setting, passed through to
//! every client the connectors create; values of secret settings are redacted wherever the
//! connection is shown.

use std::collections::BTreeMap;

use rdkafka::ClientConfig;

/// Bootstrap servers and client settings shared by Kafka sources and sinks.
///
/// Any [librdkafka setting](https://github.com/confluentinc/librdkafka/blob/master/CONFIGURATION.md)
/// can be set (`security.protocol`, `sasl.mechanism`, `sasl.username`, `sasl.password`,
/// `ssl.ca.location`, ...). `Debug` output redacts the values of passwords, secrets and keys.
///
/// ```
/// use riffle_kafka::KafkaConnection;
/// let kafka = KafkaConnection::new("broker:9093")
///     .set("security.protocol", "sasl_ssl")
///     .set("sasl.mechanism", "SCRAM-SHA-512")
///     .set("sasl.username", "riffle")
///     .set("sasl.password", "hunter2");
/// assert!(!format!("{kafka:?}").contains("hunter2"));
/// ```
#[derive(Clone)]
pub struct KafkaConnection {
    bootstrap: String,
    settings: BTreeMap<String, String>,
}

impl KafkaConnection {
    /// A connection to the brokers in `bootstrap` (`host:port[,host:port...]`).
    pub fn new(bootstrap: impl Into<String>) -> Self {
        KafkaConnection {
            bootstrap: bootstrap.into(),
            settings: BTreeMap::new(),
        }
    }

    /// Sets a librdkafka client setting for every client of this connection.
    pub fn set(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.settings.insert(key.into(), value.into());
        self
    }

    /// The bootstrap servers.
    pub fn bootstrap(&self) -> &str {
        &self.bootstrap
    }

    /// A client configuration with the bootstrap servers and the connection's settings.
    pub(crate) fn client_config(&self) -> ClientConfig {
        self.client_config_with(&[])
    }

    /// A client configuration with `defaults` that the connection's own settings override.
    pub(crate) fn client_config_with(&self, defaults: &[(&str, &str)]) -> ClientConfig {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", &self.bootstrap);
        for (key, value) in defaults {
            config.set(*key, *value);
        }
        for (key, value) in &self.settings {
            config.set(key, value);
        }
        config
    }

    /// Checks the settings before the job starts: librdkafka rejects unknown keys and bad values,
    /// and the error names the setting.
    pub(crate) fn validate(&self, setting: &str) -> riffle::Result<()> {
        if self.bootstrap.trim().is_empty() {
            return Err(riffle::Error::config(
                setting,
                "needs bootstrap servers (host:port)",
            ));
        }
        self.client_config()
            .create::<rdkafka::producer::BaseProducer>()
            .map(drop)
            .map_err(|e| {
                riffle::Error::config(setting, format!("rejected by the Kafka client: {e}"))
            })
    }
}

/// Whether the value of `key` must not be shown.
fn is_secret(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    [
        "password",
        "secret",
        "jaas",
        "token",
        "ssl.key",
        "keystore",
        "credentials",
    ]
    .iter()
    .any(|word| key.contains(word))
}

impl std::fmt::Debug for KafkaConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let settings: BTreeMap<&str, &str> = self
            .settings
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str(),
                    if is_secret(k) {
                        "<redacted>"
                    } else {
                        v.as_str()
                    },
                )
            })
            .collect();
        f.debug_struct("KafkaConnection")
            .field("bootstrap", &self.bootstrap)
            .field("settings", &settings)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_redacted_and_other_settings_shown() {
        let kafka = KafkaConnection::new("b:9092")
            .set("sasl.password", "p4ss")
            .set("ssl.key.password", "k3y")
            .set("sasl.oauthbearer.client.secret", "s3cret")
            .set("client.id", "riffle-test");
        let shown = format!("{kafka:?}");
        for secret in ["p4ss", "k3y", "s3cret"] {
            assert!(!shown.contains(secret), "{shown}");
        }
        assert!(
            shown.contains("riffle-test") && shown.contains("b:9092"),
            "{shown}"
        );
    }

    #[test]
    fn an_unknown_setting_fails_validation_naming_it() {
        let err = KafkaConnection::new("b:9092")
            .set("no.such.setting", "1")
            .validate("kafka")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`kafka`") && err.contains("no.such.setting"),
            "{err}"
        );
        let err = KafkaConnection::new(" ")
            .validate("kafka")
            .unwrap_err()
            .to_string();
        assert!(err.contains("bootstrap"), "{err}");
    }
}
