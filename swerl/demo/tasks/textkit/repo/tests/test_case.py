from textkit import camel_case, kebab_case, snake_case


def test_snake_case_from_camel():
    assert snake_case("parseHTTPResponse") == "parse_http_response"


def test_snake_case_keeps_digits():
    assert snake_case("version2Name") == "version_2_name"


def test_camel_case_from_snake():
    assert camel_case("user_id") == "userId"


def test_camel_case_of_empty_string():
    assert camel_case("") == ""


def test_kebab_case():
    assert kebab_case("UserProfileID") == "user-profile-id"
