//! Kubernetes `Status` errors with the real apiserver's messages and reasons.

use serde_json::{Value, json};

#[derive(Debug, Clone)]
pub(crate) struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Value>,
}

pub(crate) type ApiResult<T> = Result<T, ApiError>;

/// `applications.argoproj.io` / `configmaps` — what the real server names a resource in messages.
pub(crate) fn qualified(plural: &str, group: &str) -> String {
    if group.is_empty() {
        plural.to_string()
    } else {
        format!("{plural}.{group}")
    }
}

fn details(name: &str, group: &str, kind: &str) -> Value {
    let mut d = json!({"name": name, "kind": kind});
    if !group.is_empty() {
        d["group"] = json!(group);
    }
    d
}

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    pub fn with_details(mut self, d: Value) -> ApiError {
        self.details = Some(d);
        self
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(400, "BadRequest", message)
    }

    pub fn not_found(plural: &str, group: &str, name: &str) -> ApiError {
        ApiError::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", qualified(plural, group)),
        )
        .with_details(details(name, group, plural))
    }

    pub fn no_resource() -> ApiError {
        ApiError::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
        .with_details(json!({}))
    }

    pub fn already_exists(plural: &str, group: &str, name: &str) -> ApiError {
        ApiError::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", qualified(plural, group)),
        )
        .with_details(details(name, group, plural))
    }

    pub fn conflict(plural: &str, group: &str, name: &str, why: &str) -> ApiError {
        ApiError::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                qualified(plural, group)
            ),
        )
        .with_details(details(name, group, plural))
    }

    pub fn modified(plural: &str, group: &str, name: &str) -> ApiError {
        ApiError::conflict(
            plural,
            group,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    pub fn method_not_allowed() -> ApiError {
        ApiError::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )
        .with_details(json!({}))
    }

    pub fn gone(message: impl Into<String>) -> ApiError {
        ApiError::new(410, "Expired", message)
    }

    pub fn too_large() -> ApiError {
        ApiError::new(
            413,
            "RequestEntityTooLarge",
            "Request entity too large: limit is 3145728",
        )
    }

    pub fn unsupported_media(ct: &str) -> ApiError {
        ApiError::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml (got {ct:?})"
            ),
        )
    }

    /// 422 Invalid with one cause.
    pub fn invalid(kind: &str, group: &str, name: &str, field: &str, cause: &str) -> ApiError {
        ApiError::invalid_many(kind, group, name, &[(field.to_string(), cause.to_string())])
    }

    pub fn invalid_many(
        kind: &str,
        group: &str,
        name: &str,
        causes: &[(String, String)],
    ) -> ApiError {
        let msg = causes
            .iter()
            .map(|(f, c)| format!("{f}: {c}"))
            .collect::<Vec<_>>();
        let joined = if msg.len() == 1 {
            msg[0].clone()
        } else {
            format!("[{}]", msg.join(", "))
        };
        let causes_json: Vec<Value> = causes
            .iter()
            .map(|(f, c)| {
                let reason = if c.starts_with("Required value") {
                    "FieldValueRequired"
                } else if c.starts_with("Forbidden") {
                    "FieldValueForbidden"
                } else {
                    "FieldValueInvalid"
                };
                json!({"reason": reason, "message": c, "field": f})
            })
            .collect();
        let mut d = details(name, group, kind);
        d["causes"] = Value::Array(causes_json);
        ApiError::new(
            422,
            "Invalid",
            format!("{} \"{name}\" is invalid: {joined}", qualified(kind, group)),
        )
        .with_details(d)
    }

    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(500, "InternalError", message)
    }

    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::new(403, "Forbidden", message)
    }

    pub fn to_status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        s
    }
}
