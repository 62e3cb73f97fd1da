"""Bridges to other tools. Each needs an optional extra; importing one without it says which."""

# One line, because it is what a user who lacks the extra reads first.
LM_EVAL_INSTALL_HINT = ("lm-evaluation-harness is not installed; install it with: "
                        "pip install 'bulkinfer[eval]'")
