#!/bin/sh
# slugify TEXT...: prints TEXT as a URL slug (see specs/slugify.md).
printf '%s\n' "$*" | tr 'A-Z' 'a-z' | tr -c 'a-z0-9\n' '-'
