"""The label of a token that is not trained (prompt, padding, a packed sample's first token): PyTorch's and
transformers' ``ignore_index``. Its one home: data builds the labels, train's losses skip them."""

IGNORE_INDEX = -100
