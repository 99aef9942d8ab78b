"""Run bundle helpers (benchmaker/engine/bundle.py)."""

from benchmaker.engine.bundle import redact


def test_redact_hides_secrets_and_keeps_token_counts():
    config = {
        "api_key": "sk-1",
        "max_tokens": 64,
        "max_new_tokens": 8,
        "prompt_tokens": 3,
        "headers": {"Authorization": "Bearer x", "X-API-Key": "k", "Accept": "text/event-stream"},
        "auth_token": "t",
        "client_secret": "s",
        "tokenizer": "tok.json",
        "OPENAI_API_KEY": "e",
        "lanes": [{"password": "p", "name": "chat"}],
        "token": None,
    }
    assert redact(config) == {
        "api_key": "***",
        "max_tokens": 64,
        "max_new_tokens": 8,
        "prompt_tokens": 3,
        "headers": {"Authorization": "***", "X-API-Key": "***", "Accept": "text/event-stream"},
        "auth_token": "***",
        "client_secret": "***",
        "tokenizer": "tok.json",
        "OPENAI_API_KEY": "***",
        "lanes": [{"password": "***", "name": "chat"}],
        "token": None,
    }


def test_redact_hides_the_userinfo_and_query_values_of_a_url_and_keeps_the_rest():
    config = {
        "exchange": "s3://AKIA1:s3cr/et@bench/exchange",
        "base_url": "http://u:p@127.0.0.1:8000/v1",
        "plain": "http://127.0.0.1:8000",
        "mail": "a@b.c",
        "user_only": "sftp://me@host/x",
        "ftp_url": "ftp://bench:p@ss@host/x",
        "query": "https://h/p?a=1&token=T0K&X-Amz-Signature=s1",
        "message": "FileNotFoundError: s3://k:hunter2@b/x not found",
    }
    # a user name alone can be the token (http://ghp_TOKEN@host): all userinfo goes
    assert redact(config) == {
        "exchange": "s3://***@bench/exchange",
        "base_url": "http://***@127.0.0.1:8000/v1",
        "plain": "http://127.0.0.1:8000",
        "mail": "a@b.c",
        "user_only": "sftp://***@host/x",
        "ftp_url": "ftp://***@host/x",
        "query": "https://h/p?a=***&token=***&X-Amz-Signature=***",
        "message": "FileNotFoundError: s3://***@b/x not found",
    }
