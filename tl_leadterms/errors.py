"""The one exception type of tl_leadterms."""


class LeadTermsError(ValueError):
    """Bad input to tl_leadterms.

    The message names the offending value and says what to do about it. It subclasses
    ``ValueError`` so that generic handlers keep working.
    """
