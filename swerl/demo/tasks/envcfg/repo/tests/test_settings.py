import pytest

from envcfg import ConfigError, MissingSetting, Settings


def make(**environ):
    return Settings(environ, prefix="APP_")


def test_get_reads_prefixed_variable():
    assert make(APP_NAME="shop").get("NAME") == "shop"


def test_get_int():
    assert make(APP_PORT=" 8080 ").get_int("PORT") == 8080


def test_get_bool_words():
    settings = make(APP_A="Yes", APP_B="off", APP_C="1")
    assert [settings.get_bool(n) for n in "ABC"] == [True, False, True]


def test_get_list():
    assert make(APP_HOSTS="a.example, b.example,").get_list("HOSTS") == ["a.example", "b.example"]


def test_default_is_used_when_missing():
    assert make().get_int("PORT", default=8000) == 8000


def test_missing_without_default_raises_config_error():
    with pytest.raises(ConfigError, match="APP_PORT"):
        make().get_int("PORT")


def test_missing_setting_is_also_a_key_error():
    with pytest.raises(KeyError):
        make().get("SECRET")
    assert issubclass(MissingSetting, ConfigError)
