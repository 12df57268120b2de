#!/usr/bin/env bash
# Creates what infra/template.yaml declares, under fixed names, once LocalStack is ready:
# the wake queue (visibility 1800 s, redrive to the DLQ after 5 receives), its dead-letter
# queue, the DynamoDB table (pk/sk, on demand) and the payload bucket (encrypted, no public
# access). tests/infra/test_localstack_config.py keeps these values equal to the template's.
set -euo pipefail

REGION="${AWS_DEFAULT_REGION:-us-east-1}"
QUEUE=fxdurable-wakes
DLQ=fxdurable-wakes-dlq
TABLE=fxdurable
BUCKET=fxdurable-payloads
VISIBILITY_TIMEOUT_S=1800
MAX_RECEIVE_COUNT=5

dlq_url=$(awslocal sqs create-queue --region "$REGION" --queue-name "$DLQ" \
  --attributes MessageRetentionPeriod=1209600 --query QueueUrl --output text)
dlq_arn=$(awslocal sqs get-queue-attributes --region "$REGION" --queue-url "$dlq_url" \
  --attribute-names QueueArn --query Attributes.QueueArn --output text)
# RedrivePolicy is a JSON string inside the JSON map of attributes.
attributes=$(printf '{"VisibilityTimeout":"%s","RedrivePolicy":"{\\"deadLetterTargetArn\\":\\"%s\\",\\"maxReceiveCount\\":\\"%s\\"}"}' \
  "$VISIBILITY_TIMEOUT_S" "$dlq_arn" "$MAX_RECEIVE_COUNT")
awslocal sqs create-queue --region "$REGION" --queue-name "$QUEUE" --attributes "$attributes"

awslocal dynamodb create-table --region "$REGION" --table-name "$TABLE" \
  --attribute-definitions AttributeName=pk,AttributeType=S AttributeName=sk,AttributeType=S \
  --key-schema AttributeName=pk,KeyType=HASH AttributeName=sk,KeyType=RANGE \
  --billing-mode PAY_PER_REQUEST
awslocal dynamodb update-continuous-backups --region "$REGION" --table-name "$TABLE" \
  --point-in-time-recovery-specification PointInTimeRecoveryEnabled=true

awslocal s3api create-bucket --region "$REGION" --bucket "$BUCKET"
awslocal s3api put-public-access-block --bucket "$BUCKET" --public-access-block-configuration \
  BlockPublicAcls=true,IgnorePublicAcls=true,BlockPublicPolicy=true,RestrictPublicBuckets=true
awslocal s3api put-bucket-encryption --bucket "$BUCKET" --server-side-encryption-configuration \
  '{"Rules":[{"ApplyServerSideEncryptionByDefault":{"SSEAlgorithm":"AES256"}}]}'

echo "fxdurable: created $QUEUE, $DLQ, $TABLE and $BUCKET in $REGION"
