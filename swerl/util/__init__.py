"""Small helpers that several swerl packages share and that belong to none of them."""
