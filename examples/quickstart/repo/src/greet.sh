#!/bin/sh
name="${1:-world}"
echo "Hello, $name!"
