from mlx_notebook.origin import clean_url


def test_credentials_never_survive_in_a_url():
    assert clean_url("http://user:p@ss@host:8080/v1") == "http://host:8080/v1"
    assert clean_url("https://a:b@h/v1?api_key=SECRET&x=1") == "https://h/v1?x=1"
    assert clean_url("http://h/v1?token=T&Signature=S&model=m") == "http://h/v1?model=m"
    assert clean_url("default") == "default" and clean_url("/a/b") == "/a/b"
