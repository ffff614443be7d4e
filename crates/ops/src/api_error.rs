//! What an API server's answer to a failed request says, the same for every controller.

/// Whether `e` is the API server's answer with HTTP status `code` (404 not found, 409 conflict or
/// already exists, 422 invalid, ...).
pub fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_api_servers_answer_with_that_code_matches() {
        let api = |code| {
            kube::Error::Api(
                kube::core::Status::failure("nope", "NotFound")
                    .with_code(code)
                    .boxed(),
            )
        };
        assert!(is_status(&api(404), 404));
        assert!(!is_status(&api(409), 404));
        assert!(!is_status(
            &kube::Error::LinesCodecMaxLineLengthExceeded,
            404
        ));
    }
}
