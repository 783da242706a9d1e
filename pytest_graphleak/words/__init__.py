"""The words of a diagnosis: every fix and story sentence, made from its facts.

The diagnosis (``diagnose/``) finds the facts (the typed holder chain, the lines that
made and stored the leak, what grew) and ``diagnose.classify.pattern_of`` decides the
pattern; this package words them: ``fix.choose_fix`` (the one fix chooser),
``fix.story_of``, ``lines`` (the fix worded for the user's own line, read with ``ast``),
``backward`` (whether a later backward reads the container), ``chain`` (what the
typed chain says), ``cycles`` (a reference cycle's note and fix), ``notes`` (the
diagnosis' notes), ``verify`` (why a fix is not verified) and ``outlive`` (the outlive
audit's reasons and notes). Nothing here reads a live object or a rendered chain label.
"""
