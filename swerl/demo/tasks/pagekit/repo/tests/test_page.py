from pagekit import Paginator


def test_first_page_navigation():
    page = Paginator(list(range(25)), per_page=10).page(1)
    assert page.has_next() and not page.has_previous()
    assert page.next_page_number() == 2


def test_last_partial_page_navigation():
    page = Paginator(list(range(25)), per_page=10).page(3)
    assert not page.has_next() and page.has_previous()
    assert page.previous_page_number() == 2


def test_start_and_end_index():
    page = Paginator(list(range(25)), per_page=10).page(3)
    assert (page.start_index(), page.end_index()) == (21, 25)


def test_repr():
    assert repr(Paginator("abcde", per_page=2).page(2)) == "<Page 2 of 3>"
