import pytest

from pagekit import EmptyPage, PageNotAnInteger, Paginator


def test_num_pages_with_partial_last_page():
    assert Paginator(list(range(95)), per_page=10).num_pages == 10


def test_empty_sequence_has_one_page():
    paginator = Paginator([], per_page=10)
    assert paginator.num_pages == 1
    assert list(paginator.page(1)) == []


def test_page_contents():
    paginator = Paginator(list(range(25)), per_page=10)
    assert list(paginator.page(1)) == list(range(10))
    assert list(paginator.page(3)) == [20, 21, 22, 23, 24]


def test_page_zero_is_rejected():
    with pytest.raises(EmptyPage):
        Paginator([1, 2, 3], per_page=2).page(0)


def test_page_past_the_end_is_rejected():
    with pytest.raises(EmptyPage):
        Paginator([1, 2, 3], per_page=2).page(5)


def test_non_integer_page_number():
    with pytest.raises(PageNotAnInteger):
        Paginator([1, 2, 3], per_page=2).page("two")


def test_per_page_must_be_positive():
    with pytest.raises(ValueError):
        Paginator([1], per_page=0)
